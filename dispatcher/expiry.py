"""When finished jobs are deleted: `runPolicy.ttlSecondsAfterFinished` after completion.

As in Kubeflow, where the job object is garbage-collected that long after it finished, the
hub deletes the job then: its name is free for a new submission, and its worker is told to
remove what is left (the worker's own timer usually got there first). Times are wall-clock
from the job's `completionTime`, so a hub rebuilt from the status topic keeps them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import UTC, datetime

from dispatcher.ledger import JobRecord
from schemas.status import JobPhase

COMPLETED = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED})
"""Phases a job's own run ends in: the ones ttlSecondsAfterFinished counts from."""


@dataclass(order=True)
class Expiry:
    at: float
    """Seconds since the epoch."""
    uid: str = field(compare=False)
    submission: str | None = field(compare=False)
    """The run it belongs to: a job deleted and submitted again is a new run."""
    ttl: int = field(compare=False)


class Expiries:
    """Finished jobs waiting for their ttlSecondsAfterFinished, soonest first."""

    def __init__(self) -> None:
        self._heap: list[Expiry] = []

    def add(self, record: JobRecord, completed: datetime, ttl: int | None = None) -> None:
        """Note a job that completed at `completed`, if its run policy sets a TTL (`ttl`:
        that TTL, for a record that no longer holds its job)."""
        if record.phase not in COMPLETED:
            return
        if record.job is not None:
            ttl = record.job.run_policy.ttlSecondsAfterFinished
        if ttl is None:
            return
        if completed.tzinfo is None:
            completed = completed.replace(tzinfo=UTC)
        expiry = Expiry(completed.timestamp() + ttl, record.uid, record.submission, ttl)
        heapq.heappush(self._heap, expiry)

    def due(self, now: float) -> list[Expiry]:
        """The expiries whose time has come, taken out."""
        found = []
        while self._heap and self._heap[0].at <= now:
            found.append(heapq.heappop(self._heap))
        return found

    @staticmethod
    def still_applies(expiry: Expiry, record: JobRecord | None) -> bool:
        """Whether `record` is still the completed run the expiry was noted for."""
        return (
            record is not None
            and record.submission == expiry.submission
            and record.phase in COMPLETED
        )
