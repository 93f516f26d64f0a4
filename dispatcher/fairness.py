"""Fairness: the order in which queued jobs are offered to placement in each scheduling pass.

Higher priority first (`schedulingPolicy.priorityClass`, mapped to a number by config; unknown
or absent classes get the default). Within one priority the queues
(`schedulingPolicy.queue`, default `default`) take turns, the queue served longest ago going
first, so one producer's burst cannot starve another's queue; inside a queue jobs keep their
submission order. A queue with a limit on jobs in flight offers only as many jobs as it has
slots left; its other jobs are held back this pass, with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dispatcher.ledger import JobRecord
from schemas.status import JobPhase

IN_FLIGHT_PHASES = frozenset(
    {
        JobPhase.ASSIGNED,
        JobPhase.CREATED,
        JobPhase.RUNNING,
        JobPhase.RESTARTING,
        JobPhase.SUSPENDED,
    }
)
"""Phases in which a job holds one of its queue's in-flight slots."""


@dataclass(frozen=True)
class FairnessConfig:
    priority_classes: Mapping[str, int] = field(default_factory=dict)
    """priorityClass name -> number; higher is placed first."""
    default_priority: int = 0
    default_queue: str = "default"
    queue_limits: Mapping[str, int] = field(default_factory=dict)
    """Queue name -> most jobs in flight at once."""
    default_queue_limit: int | None = None
    """The limit of queues not named in `queue_limits`; None is unlimited."""

    def priority_of(self, record: JobRecord) -> int:
        name = self.class_of(record)
        if name is None:
            return self.default_priority
        return self.priority_classes.get(name, self.default_priority)

    def class_of(self, record: JobRecord) -> str | None:
        """The job's priorityClass, None where it names none."""
        policy = record.job.run_policy.schedulingPolicy if record.job is not None else None
        return policy.priorityClass if policy is not None else None

    def known_priority(self, record: JobRecord) -> int | None:
        """The job's priority as the hub shows it: None for a class not among the configured
        ones (the hub rejects such a job), or for a record without its job."""
        name = self.class_of(record)
        if record.job is None or (
            name is not None and self.priority_classes and name not in self.priority_classes
        ):
            return None
        return self.priority_of(record)

    def queue_of(self, record: JobRecord) -> str:
        return record.queue or self.default_queue

    def limit_of(self, queue: str) -> int | None:
        return self.queue_limits.get(queue, self.default_queue_limit)

    @property
    def limits_queues(self) -> bool:
        """Whether any queue has a limit: only then are the jobs in flight counted."""
        return bool(self.queue_limits) or self.default_queue_limit is not None


def in_flight_by_queue(records: Iterable[JobRecord], config: FairnessConfig) -> Counter[str]:
    """How many jobs of each queue hold an in-flight slot (pass the whole ledger)."""
    return Counter(config.queue_of(r) for r in records if r.phase in IN_FLIGHT_PHASES)


def _arrival(record: JobRecord) -> tuple[float, float]:
    """Submitted first, first in its queue (then, as the hub read them)."""
    return record.submitted_at, record.queued_at


def admission_order(
    records: Iterable[JobRecord],
    in_flight: Mapping[str, int],
    config: FairnessConfig,
    last_served: Mapping[str, int] | None = None,
) -> list[tuple[JobRecord, str | None]]:
    """The queued `records` in the order to try placing them, each with None, or the reason it
    is held back this pass (held-back jobs come last).

    `last_served` maps a queue to when it last had a job placed (any increasing number);
    queues missing from it count as never served. Every job offered is counted against its
    queue's limit, whether or not it then fits somewhere, so a queue never overshoots.
    """
    served = last_served or {}
    by_priority: dict[int, dict[str, list[JobRecord]]] = {}
    for record in sorted(records, key=_arrival):
        queues = by_priority.setdefault(config.priority_of(record), {})
        queues.setdefault(config.queue_of(record), []).append(record)
    slots = {
        queue: limit - in_flight.get(queue, 0)
        for queue in {q for queues in by_priority.values() for q in queues}
        if (limit := config.limit_of(queue)) is not None
    }
    offered: list[tuple[JobRecord, str | None]] = []
    held: list[tuple[JobRecord, str | None]] = []
    for priority in sorted(by_priority, reverse=True):
        queues = by_priority[priority]
        turn = sorted(queues, key=lambda q: (served.get(q, -1), _arrival(queues[q][0]), q))
        depth = max(len(jobs) for jobs in queues.values())
        for round_ in range(depth):
            for queue in turn:
                jobs = queues[queue]
                if round_ >= len(jobs):
                    continue
                record = jobs[round_]
                left = slots.get(queue)
                if left is None:
                    offered.append((record, None))
                elif left > 0:
                    slots[queue] = left - 1
                    offered.append((record, None))
                else:
                    limit = config.limit_of(queue) or 0
                    running = in_flight.get(queue, 0)
                    # The rest of the limit went to jobs offered earlier in this pass.
                    offered_now = (
                        f", {limit - running} offered in this pass" if running < limit else ""
                    )
                    held.append(
                        (
                            record,
                            f"queue {queue!r} is at its limit of {limit} jobs in flight "
                            f"({running} running or assigned{offered_now})",
                        )
                    )
    return offered + held


class QueueTurns:
    """Carries the queues' turns over from one scheduling pass to the next."""

    def __init__(self, config: FairnessConfig) -> None:
        self.config = config
        self._last_served: dict[str, int] = {}
        self._tick = 0

    def order(
        self, queued: Iterable[JobRecord], everyone: Iterable[JobRecord]
    ) -> list[tuple[JobRecord, str | None]]:
        """`queued`: the jobs waiting for placement; `everyone`: at least every job in an
        in-flight phase (the whole ledger will do; read only when a queue has a limit)."""
        in_flight: Counter[str] = Counter()
        if self.config.limits_queues:
            in_flight = in_flight_by_queue(everyone, self.config)
        return admission_order(queued, in_flight, self.config, self._last_served)

    def placed(self, record: JobRecord) -> None:
        """Note that `record` was placed: its queue goes to the back of the turn order."""
        self._tick += 1
        self._last_served[self.config.queue_of(record)] = self._tick
