"""Capacity handed to a cluster but not yet visible in its heartbeats.

Without this, a burst of jobs placed between two heartbeats would all see the same free
capacity and over-fill the cluster. Totals per node and per cluster are kept up to date on
every change, since placement reads them for every candidate cluster of every job.
"""

from __future__ import annotations

from dispatcher.amounts import Amount
from dispatcher.gang_fit import Usage
from schemas.cluster import ClusterSnapshot


class Reservations:
    def __init__(self) -> None:
        self._held: dict[str, dict[str, Usage]] = {}
        self._cluster_of: dict[str, str] = {}
        """job uid -> the cluster holding its reservation, so a release costs one lookup."""
        self._per_node: dict[str, dict[str, dict[str, Amount]]] = {}
        self._per_cluster: dict[str, dict[str, Amount]] = {}
        self.version = 0
        """Changes whenever any reservation does (lets callers cache derived views)."""

    def _apply(self, cluster: str, usage: Usage, sign: int) -> None:
        nodes = self._per_node.setdefault(cluster, {})
        totals = self._per_cluster.setdefault(cluster, {})
        for node, resources in usage.items():
            slot = nodes.setdefault(node, {})
            for resource, amount in resources.items():
                if sign < 0:
                    amount = -amount
                slot[resource] = slot.get(resource, 0) + amount
                totals[resource] = totals.get(resource, 0) + amount
        self.version += 1

    def reserve(self, cluster: str, job_uid: str, usage: Usage) -> None:
        self.release(job_uid)
        self._held.setdefault(cluster, {})[job_uid] = usage
        self._cluster_of[job_uid] = cluster
        self._apply(cluster, usage, +1)

    def release(self, job_uid: str) -> None:
        cluster = self._cluster_of.pop(job_uid, None)
        if cluster is None:
            return
        usage = self._held[cluster].pop(job_uid, None)
        if usage is not None:
            self._apply(cluster, usage, -1)

    def reconcile(self, snapshot: ClusterSnapshot) -> list[str]:
        """Drop reservations the heartbeat now accounts for; returns their job uids."""
        jobs = self._held.get(snapshot.name, {})
        visible = set(snapshot.jobs)
        seen = [uid for uid in jobs if uid in visible]
        for uid in seen:
            self._apply(snapshot.name, jobs.pop(uid), -1)
            del self._cluster_of[uid]
        return seen

    def on_node(self, cluster: str) -> dict[str, dict[str, Amount]]:
        """Reserved amount per node and resource (read-only view)."""
        return self._per_node.get(cluster, {})

    def count(self, cluster: str | None = None) -> int:
        if cluster is not None:
            return len(self._held.get(cluster, {}))
        return sum(len(jobs) for jobs in self._held.values())

    def total(self, cluster: str, resource: str) -> Amount:
        return self._per_cluster.get(cluster, {}).get(resource, 0)
