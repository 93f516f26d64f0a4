"""Capacity handed to a cluster but not yet visible in its heartbeats.

Without this, a burst of jobs placed between two heartbeats would all see the same free
capacity and over-fill the cluster.
"""

from __future__ import annotations

from decimal import Decimal

from dispatcher.gang_fit import Usage
from schemas.cluster import ClusterSnapshot


class Reservations:
    def __init__(self) -> None:
        self._held: dict[str, dict[str, Usage]] = {}

    def reserve(self, cluster: str, job_uid: str, usage: Usage) -> None:
        self._held.setdefault(cluster, {})[job_uid] = usage

    def release(self, job_uid: str) -> None:
        for jobs in self._held.values():
            jobs.pop(job_uid, None)

    def reconcile(self, snapshot: ClusterSnapshot) -> list[str]:
        """Drop reservations the heartbeat now accounts for; returns their job uids."""
        jobs = self._held.get(snapshot.name, {})
        seen = [uid for uid in jobs if uid in set(snapshot.jobs)]
        for uid in seen:
            del jobs[uid]
        return seen

    def on_node(self, cluster: str) -> dict[str, dict[str, Decimal]]:
        """Reserved amount per node and resource."""
        totals: dict[str, dict[str, Decimal]] = {}
        for usage in self._held.get(cluster, {}).values():
            for node, resources in usage.items():
                slot = totals.setdefault(node, {})
                for resource, amount in resources.items():
                    slot[resource] = slot.get(resource, Decimal(0)) + amount
        return totals

    def count(self, cluster: str | None = None) -> int:
        if cluster is not None:
            return len(self._held.get(cluster, {}))
        return sum(len(jobs) for jobs in self._held.values())

    def total(self, cluster: str, resource: str) -> Decimal:
        return sum(
            (r.get(resource, Decimal(0)) for r in self.on_node(cluster).values()), Decimal(0)
        )
