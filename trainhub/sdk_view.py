"""The SDK's view of jobs: status events folded into one `TrainHubJob` per job, kept current
by a background reader of the status topic so that a call never re-reads the whole topic."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bus.base import Bus, Record, Subscription
from bus.epochs import EpochFence
from bus.topics import Topics
from schemas.codec import decode_event
from schemas.errors import EventDecodeError
from schemas.events import EventType, JobStatusUpdate, PlacementDecision
from schemas.status import (
    ALREADY_EXISTS,
    TTL_EXPIRED,
    ConditionType,
    JobCondition,
    JobPhase,
    JobStatus,
)

log = logging.getLogger(__name__)

HUB_SOURCE = "trainhub/hub"
WORKER_SOURCE_PREFIX = "trainhub/worker/"
HISTORY = 30
"""Status events kept per job (for `describe`)."""
_POLL = 0.1
REFUSED = ALREADY_EXISTS
"""The hub's reason when it refuses a submission of a job that already exists."""

_PHASE_CONDITIONS = {
    JobPhase.CREATED: ConditionType.CREATED,
    JobPhase.RUNNING: ConditionType.RUNNING,
    JobPhase.RESTARTING: ConditionType.RESTARTING,
    JobPhase.SUSPENDED: ConditionType.SUSPENDED,
    JobPhase.SUCCEEDED: ConditionType.SUCCEEDED,
    JobPhase.FAILED: ConditionType.FAILED,
    JobPhase.REJECTED: ConditionType.FAILED,
}

_SUCCESS: frozenset[str] = frozenset({ConditionType.SUCCEEDED, ConditionType.COMPLETE})
_SAME_CONDITIONS: dict[str, frozenset[str]] = {c: _SUCCESS for c in _SUCCESS}


class JobEvent(BaseModel):
    """One step of a job's life as the status topic told it."""

    time: datetime
    phase: JobPhase
    reason: str | None = None
    message: str | None = None
    cluster: str | None = None
    source: str


class TrainHubJob(BaseModel):
    """A job as its status events describe it. `phase` None: submitted by this client and not
    yet acknowledged by the hub."""

    model_config = ConfigDict(extra="forbid")

    uid: str
    name: str | None = None
    namespace: str | None = None
    kind: str | None = None
    framework: str | None = None
    queue: str | None = None
    priority_class: str | None = None
    """The job's `schedulingPolicy.priorityClass`, None where it names none."""
    priority: int | None = None
    """The priority the hub resolved the class to (higher is placed first); None before the
    hub's first status, or for a class the hub does not know."""
    phase: JobPhase | None = None
    cluster: str | None = None
    attempt: int = 0
    reason: str | None = None
    message: str | None = None
    status: JobStatus = Field(default_factory=JobStatus)
    placement: PlacementDecision | None = None
    spec: dict[str, Any] | None = None
    """The job document as submitted (from the hub's first status)."""
    runtime: dict[str, Any] | None = None
    """A TrainJob's runtime as the hub resolved it (with `spec`)."""
    submission: str | None = None
    created: datetime | None = None
    updated: datetime | None = None
    events: list[JobEvent] = Field(default_factory=list)
    sequence: int = 0
    """The newest worker sequence applied (orders a run's worker updates)."""

    @property
    def key(self) -> str:
        return f"{self.namespace or 'default'}/{self.name or self.uid}"

    @property
    def conditions(self) -> list[JobCondition]:
        return self.status.conditions

    @property
    def finished(self) -> bool:
        return self.phase is not None and self.phase.finished

    def has_condition(self, ctype: str) -> bool:
        """The Kubeflow condition is True, or the phase says the same (before a worker
        reported conditions, and for the hub's own final phases such as Rejected). A job
        deleted by its owner has none: what it had is history. One deleted because its
        ttlSecondsAfterFinished ran out had finished, and keeps the conditions it ended with."""
        # A TrainJob's Complete is the v1 kinds' Succeeded: a caller may wait for either.
        names = _SAME_CONDITIONS.get(ctype, {ctype})
        if self.phase == JobPhase.DELETED:
            return self.reason == TTL_EXPIRED and any(self.status.is_true(c) for c in names)
        if any(self.status.is_true(c) for c in names):
            return True
        return self.phase is not None and _PHASE_CONDITIONS.get(self.phase) in names


class StatusView:
    """Folds status events the way the hub's ledger does: hub decisions start runs and move
    them between clusters; a worker's update counts only for the run it belongs to."""

    def __init__(self) -> None:
        self.jobs: dict[str, TrainHubJob] = {}
        self.refused: set[str] = set()
        """Submission ids the hub refused as duplicates."""

    def apply(self, update: JobStatusUpdate, source: str, time: datetime) -> bool:
        """Fold one update in; False when it changes nothing (stale or a duplicate)."""
        if update.reason == REFUSED and update.submission is not None:
            self.refused.add(update.submission)
            return True
        if source.startswith(WORKER_SOURCE_PREFIX):
            return self._apply_worker(update, source, time)
        return self._apply_hub(update, source, time)

    def _apply_hub(self, update: JobStatusUpdate, source: str, time: datetime) -> bool:
        job = self.jobs.get(update.uid)
        if job is None or (update.submission and update.submission != job.submission):
            job = TrainHubJob(uid=update.uid, submission=update.submission, created=time)
            self.jobs[update.uid] = job
        _describe(job, update)
        job.phase = update.phase
        job.cluster, job.attempt = update.cluster, update.attempt
        job.reason, job.message = update.reason, update.message
        if update.placement is not None:
            job.placement = update.placement
        if update.job is not None:
            job.spec, job.runtime = update.job, update.runtime
        job.priority_class, job.priority = update.priority_class, update.priority
        if update.phase == JobPhase.ASSIGNED:
            job.sequence = 0
            job.status = JobStatus()
        if update.status is not None:
            # The conditions of a job no worker runs yet (Created; Suspended while held).
            job.status = update.status
        _record(job, update, source, time)
        return True

    def _apply_worker(self, update: JobStatusUpdate, source: str, time: datetime) -> bool:
        job = self.jobs.get(update.uid)
        if job is None:
            # The hub's first updates are gone (retention): start from the worker's.
            job = TrainHubJob(
                uid=update.uid, cluster=update.cluster, attempt=update.attempt, created=time
            )
            self.jobs[update.uid] = job
        elif update.cluster != job.cluster or update.attempt != job.attempt:
            return False  # from a placement that was revoked, or before the hub's Assigned
        if update.sequence <= job.sequence or job.finished:
            return False
        _describe(job, update)
        job.sequence = update.sequence
        job.phase = update.phase
        job.cluster, job.attempt = update.cluster, update.attempt
        job.reason, job.message = update.reason, update.message
        if update.status is not None:
            job.status = update.status
        _record(job, update, source, time)
        return True


def _describe(job: TrainHubJob, update: JobStatusUpdate) -> None:
    job.name = update.name or job.name
    job.namespace = update.namespace or job.namespace
    job.kind = update.kind or job.kind
    job.framework = update.framework or job.framework
    job.queue = update.queue or job.queue


def _record(job: TrainHubJob, update: JobStatusUpdate, source: str, time: datetime) -> None:
    job.updated = time
    job.events.append(
        JobEvent(
            time=time,
            phase=update.phase,
            reason=update.reason,
            message=update.message,
            cluster=update.cluster,
            source=source,
        )
    )
    del job.events[:-HISTORY]


def record_time(record: Record) -> datetime:
    return datetime.fromtimestamp(record.timestamp_ms / 1000, UTC)


def decode_status(record: Record) -> tuple[JobStatusUpdate, str] | None:
    """The status update in a record and its source, or None for anything else."""
    try:
        event = decode_event(record.headers, record.value)
    except EventDecodeError:
        return None
    if event.type != EventType.JOB_STATUS:
        return None
    try:
        return event.data_as(JobStatusUpdate), event.source
    except ValueError:
        return None


class StatusFollower:
    """Reads the status topic from its start into a `StatusView`, then follows it.

    `fresh()` returns once the view holds everything the topic held when it was called;
    `changed()` waits for the next update. A reader that dies hands its error to both."""

    def __init__(self, bus: Bus, topics: Topics) -> None:
        self.view = StatusView()
        self._bus = bus
        self._topics = topics
        self._subscription: Subscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._condition = asyncio.Condition()
        self._synced = 0
        self._version = 0
        self._error: BaseException | None = None

    async def start(self) -> None:
        subscription = self._bus.subscribe([self._topics.status], group=None)
        await subscription.start()
        self._subscription = subscription
        self._task = asyncio.create_task(self._run(subscription), name="trainhub-sdk-status")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._subscription is not None:
            await self._subscription.stop()
            self._subscription = None

    async def _run(self, subscription: Subscription) -> None:
        fence = EpochFence()  # a hub that lost its lead is not believed (bus/epochs.py)
        try:
            while True:
                changed = False
                for record in await subscription.poll(timeout=_POLL):
                    if not fence.admits(record):
                        continue
                    decoded = decode_status(record)
                    if decoded is not None:
                        update, source = decoded
                        changed |= self.view.apply(update, source, record_time(record))
                caught_up = await subscription.lag() == 0
                if changed or caught_up:
                    async with self._condition:
                        self._version += changed
                        self._synced += caught_up
                        self._condition.notify_all()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("the status reader stopped: %s", exc)
            async with self._condition:
                self._error = exc
                self._condition.notify_all()

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    async def fresh(self) -> StatusView:
        async with self._condition:
            self._check()
            seen = self._synced
            await self._condition.wait_for(lambda: self._synced > seen or self._error is not None)
            self._check()
        return self.view

    async def changed(self, timeout: float) -> None:
        """Return at the next change of the view, or after `timeout` seconds."""
        async with self._condition:
            self._check()
            seen = self._version
            try:
                async with asyncio.timeout(timeout):
                    await self._condition.wait_for(
                        lambda: self._version > seen or self._error is not None
                    )
            except TimeoutError:
                pass
            self._check()
