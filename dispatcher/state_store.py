"""The hub's state on a compacted topic: one record per job it knows, rewritten whenever the
hub changes the job and tombstoned when the job is forgotten (`finished_retention`).

A starting hub reads this topic (the jobs alive and those in their retention) and then only
the statuses published since its predecessor last committed, rather than the whole status
history: its start follows the jobs it holds, not every job it ever ran. A finished job's
record is its summary (no job document); a live one carries its document, which the hub
needs to place it again.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import to_json

from bus.base import Bus
from bus.reading import records_to_end
from dispatcher.ledger import JobRecord
from schemas.errors import JobInvalid
from schemas.events import PlacementDecision
from schemas.job_parsing import parse_job, parse_placed_job, runtime_of
from schemas.status import JobPhase, JobStatus
from schemas.trainer_runtimes import RuntimeCatalog

log = logging.getLogger(__name__)


class JobState(BaseModel):
    """One job as the hub holds it. Unknown fields are ignored, so that a hub reads the state
    a newer one wrote."""

    model_config = ConfigDict(extra="ignore")

    uid: str
    phase: JobPhase
    name: str | None = None
    namespace: str | None = None
    kind: str | None = None
    framework: str | None = None
    queue: str | None = None
    cluster: str | None = None
    attempt: int = 0
    sequence: int = 0
    reason: str | None = None
    message: str | None = None
    status: JobStatus | None = None
    decision: PlacementDecision | None = None
    """The chosen cluster and its score only: the full decision is on the status topic."""
    submission: str | None = None
    submitted_at: float = 0.0
    managed_by: str | None = None
    excluded: dict[str, float] = {}
    """Clusters avoided, until when (seconds since the epoch)."""
    ttl: int | None = None
    """runPolicy.ttlSecondsAfterFinished, kept when the document is not."""
    job: dict[str, Any] | None = None
    runtime: dict[str, Any] | None = None
    """With a TrainJob's `job`: the runtime it was resolved against, so that a restarted hub
    places it again as it did, whatever the runtimes topic holds now."""


def encode_state(record: JobRecord) -> bytes:
    """The record as its state-topic value."""
    now_wall, now = time.time(), time.monotonic()
    decision = record.decision.chosen_only() if record.decision is not None else None
    job = record.job
    fields: dict[str, Any] = {
        "uid": record.uid,
        "phase": record.phase,
        "name": record.name,
        "namespace": record.namespace,
        "kind": record.kind,
        "framework": record.framework,
        "queue": record.queue,
        "cluster": record.cluster,
        "attempt": record.attempt,
        "sequence": record.sequence,
        "reason": record.reason,
        "message": record.message,
        "status": record.status,
        "decision": decision,
        "submission": record.submission,
        "submitted_at": record.submitted_at,
        "managed_by": record.managed_by,
        "excluded": {c: now_wall + (until - now) for c, until in record.excluded.items()},
        "ttl": job.run_policy.ttlSecondsAfterFinished if job is not None else None,
        "job": record.document() if job is not None and not record.phase.finished else None,
        "runtime": runtime_of(job) if job is not None and not record.phase.finished else None,
    }
    # None fields are left out at the top (most are, for most jobs); nested models keep
    # theirs, which may be required.
    return to_json({k: v for k, v in fields.items() if v is not None})


def decode_state(
    value: bytes, runtimes: RuntimeCatalog | None = None
) -> tuple[JobRecord, int | None]:
    """A record and its ttlSecondsAfterFinished from a state-topic value; ValueError when
    the value is not a job's state. `runtimes`: where a TrainJob saved without its runtime
    (by a hub of before) finds it."""
    try:
        state = JobState.model_validate_json(value)
    except ValidationError as exc:
        raise ValueError(str(exc)) from exc
    job = None
    if state.job is not None:
        try:
            job = (
                parse_placed_job(state.job, state.runtime)
                if state.runtime is not None
                else parse_job(state.job, runtimes)
            )
        except JobInvalid as exc:
            raise ValueError(f"job {state.uid}: {exc}") from exc
    now_wall, now = time.time(), time.monotonic()
    record = JobRecord(
        uid=state.uid,
        phase=state.phase,
        job=job,
        name=state.name,
        namespace=state.namespace,
        kind=state.kind,
        framework=state.framework,
        queue=state.queue,
        cluster=state.cluster,
        attempt=state.attempt,
        sequence=state.sequence,
        reason=state.reason,
        message=state.message,
        status=state.status,
        decision=state.decision,
        submission=state.submission,
        submitted_at=state.submitted_at,
        managed_by=state.managed_by,
        excluded={
            c: now + (until - now_wall)
            for c, until in state.excluded.items()
            if until > now_wall and math.isfinite(until)
        },
    )
    return record, state.ttl


class HubStateStore:
    """Writes and reads the state topic. Writes are queued (`Bus.send`): the consumers of the
    hub flush the bus before they commit what caused them, so a state record is durable
    before the input that made it is passed for good."""

    def __init__(self, bus: Bus, topic: str) -> None:
        self._bus = bus
        self._topic = topic

    async def save(self, record: JobRecord) -> None:
        await self._bus.send(self._topic, encode_state(record), key=record.uid.encode())

    async def forget(self, uid: str) -> None:
        """A tombstone: compaction removes the job from the topic."""
        await self._bus.send(self._topic, None, key=uid.encode())

    async def load(
        self, runtimes: RuntimeCatalog | None = None
    ) -> list[tuple[JobRecord, int | None]]:
        """Every job on the topic, the newest record of each (tombstones remove), with its
        ttlSecondsAfterFinished. A value that does not decode is logged and passed over:
        the status topic still has that job's history."""
        newest: dict[bytes, bytes | None] = {}
        async for item in records_to_end(self._bus, self._topic):
            if item.key is not None:
                newest[item.key] = item.value
        loaded = []
        for key, value in newest.items():
            if value is None:
                continue
            try:
                loaded.append(decode_state(value, runtimes))
            except ValueError as exc:
                uid = key.decode(errors="replace")
                log.error("hub state unreadable, passed over: %s", exc, extra={"job": uid})
        return loaded
