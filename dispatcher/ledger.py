"""The hub's record of every job it has seen: phase, placement, attempt and last status."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from schemas.events import PlacementDecision
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
    excluded: dict[str, float] = field(default_factory=dict)
    """Clusters this job must avoid, until a monotonic time (after failing there)."""
    submission: str | None = None

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
            queue=(
                job.run_policy.schedulingPolicy.queue if job.run_policy.schedulingPolicy else None
            ),
        )


class Ledger:
    def __init__(self) -> None:
        self._jobs: dict[str, JobRecord] = {}

    def get(self, uid: str) -> JobRecord | None:
        return self._jobs.get(uid)

    def put(self, record: JobRecord) -> None:
        self._jobs[record.uid] = record

    def all(self) -> list[JobRecord]:
        return list(self._jobs.values())

    def in_phase(self, *phases: JobPhase) -> list[JobRecord]:
        return [r for r in self._jobs.values() if r.phase in phases]

    def counts(self) -> Counter[tuple[str, str]]:
        """Jobs per (phase, framework), for the state gauge."""
        return Counter((r.phase.value, r.framework or "unknown") for r in self._jobs.values())
