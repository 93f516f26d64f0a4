"""`trainhub plan`: the placement the hub would make, with the hub's own placement settings.

Several jobs are offered in the hub's admission order (priority classes, queue turns, queue
limits, counting no job in flight) and each takes the capacity it was given, as on the hub
in one scheduling pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dispatcher.fairness import admission_order
from dispatcher.ledger import JobRecord
from dispatcher.placement import Placement, Placer, VersionedReservations, describe
from dispatcher.placement_config import PlacementConfig
from dispatcher.registry import ClusterRegistry
from schemas.cluster import ClusterSnapshot
from schemas.kubeflow import AnyJob
from schemas.status import JobPhase


@dataclass(frozen=True)
class PlannedJob:
    job: AnyJob
    priority: int
    queue: str
    placement: Placement | None
    """None when the job's queue is at its limit (`held` says so)."""
    held: str | None = None

    def as_json(self) -> dict[str, Any]:
        decision: dict[str, Any] = (
            describe(self.placement)
            if self.placement is not None
            else {"chosen": None, "clusters": []}
        )
        shown: dict[str, Any] = {
            "job": self.job.key,
            "priority": self.priority,
            "queue": self.queue,
            **decision,
        }
        if self.held is not None:
            shown["held"] = self.held
        return shown


def plan_jobs(
    jobs: Sequence[AnyJob],
    clusters: Sequence[ClusterSnapshot],
    config: PlacementConfig,
    *,
    max_heartbeat_age: float = 30.0,
    now: datetime | None = None,
) -> list[PlannedJob]:
    """Plan `jobs` in the order the hub would offer them (file order within one priority and
    queue); those the hub would not place (another manager's, or held suspended) first, with
    the reason."""
    registry = ClusterRegistry(max_heartbeat_age)
    for snapshot in clusters:
        registry.update(snapshot)
    placer = Placer(config)
    fairness = config.fairness()
    reservations = VersionedReservations()
    records = []
    planned: list[PlannedJob] = []
    for index, job in enumerate(jobs):
        if not job.run_policy.managed_by_trainhub:
            manager = job.run_policy.managedBy or "kubeflow.org/training-operator (unset)"
            left = f"runPolicy.managedBy is {manager}: the hub leaves this job alone"
            planned.append(PlannedJob(job, 0, "", None, left))
            continue
        if job.run_policy.suspend:
            waiting = "runPolicy.suspend is true: the hub holds it until it is resumed"
            planned.append(PlannedJob(job, 0, "", None, waiting))
            continue
        record = JobRecord.of(job, JobPhase.QUEUED)
        record.queued_at = float(index)
        records.append(record)
    for record, held in admission_order(records, {}, fairness):
        assert record.job is not None
        priority, queue = fairness.priority_of(record), fairness.queue_of(record)
        if held is not None:
            planned.append(PlannedJob(record.job, priority, queue, None, held))
            continue
        placement = placer.plan(
            record.job,
            registry.all(),
            reservations=reservations,
            now=now,
            max_heartbeat_age=max_heartbeat_age,
            explain=True,  # `trainhub plan` shows every cluster
        )
        if placement.chosen is not None:
            reservations.reserve(placement.chosen, record.uid, placement.usage)
        planned.append(PlannedJob(record.job, priority, queue, placement))
    return planned
