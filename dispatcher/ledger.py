"""The hub's record of every job it has seen: phase, placement, attempt and last status."""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from schemas.conditions import JobStep, mark_step
from schemas.events import JobStatusUpdate, PlacementDecision
from schemas.kubeflow import AnyJob
from schemas.status import JobPhase, JobStatus


@dataclass
class JobRecord:
    uid: str
    phase: JobPhase
    job: AnyJob | None = None
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
    queued_at: float = field(default_factory=time.monotonic)
    submitted_at: float = 0.0
    """When the job was submitted (its event's time, seconds since the epoch): its place in
    its queue. Jobs on different partitions of the jobs topic are read in no set order, so
    the time the hub read one says nothing of who came first."""
    excluded: dict[str, float] = field(default_factory=dict)
    """Clusters this job must avoid, until a monotonic time (after failing there)."""
    submission: str | None = None
    waiting_noted_at: float = float("-inf")
    """When (monotonic) its last WaitingForCapacity status was published by this hub."""
    managed_by: str | None = None
    """The job's runPolicy.managedBy ("" when unset), kept when the job itself is let go
    (`compact`); None when not known (a record rebuilt from statuses without the job)."""
    _document: tuple[AnyJob, dict[str, Any]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _ledger: Ledger | None = field(default=None, init=False, repr=False, compare=False)
    """The ledger holding this record, told of every phase change to keep its index. The
    phase changes only through the transitions below (`assign`, `requeue`, `finish`, ...)."""

    def document(self) -> dict[str, Any]:
        """`job` as a document, serialised once per parsed job: the Queued status and every
        assignment carry it. Shared: read it, never modify it."""
        assert self.job is not None
        cached = self._document
        if cached is None or cached[0] is not self.job:
            cached = self._document = (self.job, self.job.to_document())
        return cached[1]

    def compact(self) -> None:
        """Let go of what only an unfinished job needs: the parsed job and its document (about
        10 KB), the placement decision (a score per cluster) and the exclusions. A finished job
        is answered from its summary; the full history stays on the status topic."""
        self.job = None
        self._document = None
        self.decision = None
        self.excluded = {}

    # -- transitions: the only writers of `phase`, each keeping the ledger's index ----------

    def _enter(self, phase: JobPhase) -> None:
        if phase is not self.phase:
            if self._ledger is not None:
                self._ledger._moved(self, phase)
            self.phase = phase

    def enqueue(self) -> None:
        """Waiting for placement again, its wait counted from now."""
        self._enter(JobPhase.QUEUED)
        self.queued_at = time.monotonic()

    def hold(self) -> None:
        """Suspended while no cluster runs it: the hub holds it until resumed."""
        self._enter(JobPhase.SUSPENDED)
        self.note(JobStep.SUSPENDED)

    def resume(self) -> None:
        """A held job queued again."""
        self.enqueue()
        self.note(JobStep.RESUMED)

    def assign(self, cluster: str) -> None:
        """Placed on `cluster`: a new attempt, whose statuses count from zero."""
        self.attempt += 1
        self.cluster = cluster
        self._enter(JobPhase.ASSIGNED)
        self.sequence = 0

    def unplace(self) -> None:
        """No cluster holds it any more (its pods are gone); the phase stays."""
        self.cluster, self.sequence = None, 0

    def requeue(self, avoid_seconds: float) -> None:
        """Taken from its cluster (lost, retired, handed back) and queued again, avoiding
        that cluster for `avoid_seconds`. The lost run's conditions are not the next one's:
        it starts over as created."""
        assert self.cluster is not None
        self.exclude(self.cluster, time.time(), avoid_seconds)
        self.unplace()
        self.enqueue()
        self.status = None
        self.note(JobStep.CREATED)

    def reject(self) -> None:
        self._enter(JobPhase.REJECTED)

    def delete(self) -> None:
        self._enter(JobPhase.DELETED)

    def finish(self, phase: JobPhase) -> None:
        """Ended as `phase` (Succeeded, Failed, ...)."""
        assert phase.finished, phase
        self._enter(phase)

    def follow(self, update: JobStatusUpdate) -> None:
        """A newer status of the current attempt from the worker that runs it."""
        self.sequence = update.sequence
        self._enter(update.phase)
        self.status = update.status
        self.reason, self.message = update.reason, update.message

    def replay(self, update: JobStatusUpdate) -> None:
        """A status the hub itself published, read back while rebuilding its state."""
        self._enter(update.phase)
        self.cluster, self.attempt = update.cluster, update.attempt
        self.reason, self.message = update.reason, update.message
        self.submission = update.submission or self.submission
        if update.placement is not None:
            self.decision = update.placement
        if update.status is not None:
            self.status = update.status
        if update.phase == JobPhase.ASSIGNED:
            self.sequence = 0

    def note(self, step: JobStep) -> None:
        """A condition of a job no worker runs, as upstream's operator sets it on the job
        object (`Created`; `Suspended`, False once `Resumed`), so that clients waiting for one
        see it."""
        if self.status is None:
            self.status = JobStatus()
        mark_step(self.status, step, self.kind or "Job", self.name or self.uid)

    def exclude(self, cluster: str, since: float, seconds: float) -> None:
        """Keep the job off `cluster` for `seconds` from `since` (seconds since the epoch: a
        restarted hub counts from its predecessor's re-dispatch, not from now)."""
        left = seconds - (time.time() - since)
        if left > 0:
            self.excluded[cluster] = time.monotonic() + left

    def avoided(self, now: float | None = None) -> frozenset[str]:
        now = time.monotonic() if now is None else now
        return frozenset(c for c, until in self.excluded.items() if until > now)

    @classmethod
    def of(cls, job: AnyJob, phase: JobPhase) -> JobRecord:
        return cls(
            uid=job.uid,
            phase=phase,
            job=job,
            name=job.metadata.name,
            namespace=job.metadata.namespace,
            kind=job.kind,
            framework=job.FRAMEWORK,
            managed_by=job.run_policy.managedBy or "",
            queue=queue_of(job),
        )


def queue_of(job: AnyJob) -> str | None:
    """The job's `schedulingPolicy.queue`, if it names one."""
    scheduling = job.run_policy.schedulingPolicy
    return scheduling.queue if scheduling else None


class Ledger:
    """Every job by uid, and by phase: a scheduling pass reads the queued and in-flight jobs,
    so its cost follows those, not every job the hub has ever seen."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobRecord] = {}
        self._by_phase: dict[JobPhase, dict[str, JobRecord]] = {p: {} for p in JobPhase}
        self._finished: dict[str, JobRecord] = {}
        """Records that finished since the last `compact_finished`."""
        self._forget_at: list[tuple[float, int, JobRecord]] = []
        """Compacted records by when they leave the ledger (a heap): a long-running hub
        holds the jobs of its retention, not every job it ever saw."""
        self._forget_order = 0

    def get(self, uid: str) -> JobRecord | None:
        return self._jobs.get(uid)

    def put(self, record: JobRecord) -> None:
        old = self._jobs.get(record.uid)
        if old is not None and old is not record:
            self._by_phase[old.phase].pop(old.uid, None)
            old._ledger = None
        self._jobs[record.uid] = record
        record._ledger = self
        self._by_phase[record.phase][record.uid] = record
        if record.phase.finished:
            self._finished[record.uid] = record

    def _moved(self, record: JobRecord, phase: JobPhase) -> None:
        self._by_phase[record.phase].pop(record.uid, None)
        self._by_phase[phase][record.uid] = record
        if phase.finished:
            self._finished[record.uid] = record

    def compact_finished(self, retention: float = math.inf) -> int:
        """Compact the records that finished since the last call and still are; returns how
        many. Called between scheduling passes rather than on the phase change itself, so the
        code that finishes a job can still publish its decision in the final status. Without
        it a long-running hub would hold every job it ever ran in full. Each is forgotten
        `retention` seconds after it finished (`forget_expired`)."""
        finished, self._finished = self._finished, {}
        compacted = 0
        now = time.time()
        for uid, record in finished.items():
            if record.phase.finished and self._jobs.get(uid) is record:
                record.compact()
                compacted += 1
                if retention != math.inf:
                    ended = record.status.completionTime if record.status else None
                    at = (ended.timestamp() if ended is not None else now) + retention
                    self._forget_order += 1
                    heapq.heappush(self._forget_at, (at, self._forget_order, record))
        return compacted

    def forget_expired(self, now: float | None = None) -> list[JobRecord]:
        """Drop the finished records whose retention ran out and that are still finished and
        still held (a job submitted again under the same uid is a new record); returns
        them. A job forgotten is as one Kubernetes garbage-collected: its name is free, and
        its history stays on the status topic."""
        now = time.time() if now is None else now
        forgotten = []
        while self._forget_at and self._forget_at[0][0] <= now:
            _, _, record = heapq.heappop(self._forget_at)
            if record.phase.finished and self._jobs.get(record.uid) is record:
                del self._jobs[record.uid]
                self._by_phase[record.phase].pop(record.uid, None)
                record._ledger = None
                forgotten.append(record)
        return forgotten

    def all(self) -> list[JobRecord]:
        return list(self._jobs.values())

    def in_phase(self, *phases: JobPhase) -> list[JobRecord]:
        if len(phases) == 1:
            return list(self._by_phase[phases[0]].values())
        return [r for p in phases for r in self._by_phase[p].values()]

    def count(self, *phases: JobPhase) -> int:
        return sum(len(self._by_phase[p]) for p in phases)

    def counts(self) -> Counter[tuple[str, str]]:
        """Jobs per (phase, framework), for the state gauge."""
        return Counter((r.phase.value, r.framework or "unknown") for r in self._jobs.values())
