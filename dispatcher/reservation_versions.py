"""Reservations that say what changed: a version and a change log per cluster and per node.

Placement keeps what it worked out for a cluster (or one of its nodes) until the
reservations there change; these counters and logs tell it when, and where.
"""

from __future__ import annotations

from dispatcher.gang_fit import Usage
from dispatcher.reservations import Reservations
from schemas.cluster import ClusterSnapshot

_CLUSTER_LOG_KEEP = 65_536
_NODE_LOG_KEEP = 4_096


class ChangeLog:
    """An append-only list of names that forgets its oldest part when it grows long."""

    __slots__ = ("_items", "_keep", "_start")

    def __init__(self, keep: int) -> None:
        self._items: list[str] = []
        self._keep = keep
        self._start = 0

    @property
    def end(self) -> int:
        """A position: what is appended from now on comes after it."""
        return self._start + len(self._items)

    def append(self, item: str) -> None:
        self._items.append(item)
        if len(self._items) > 2 * self._keep:
            del self._items[: self._keep]
            self._start += self._keep

    def since(self, position: int) -> list[str] | None:
        """What was appended after `position`; None when that is forgotten."""
        if position < self._start:
            return None
        return self._items[position - self._start :]


class VersionedReservations(Reservations):
    """`Reservations` that count and log their changes per cluster and per node."""

    def __init__(self) -> None:
        super().__init__()
        self._versions: dict[str, int] = {}
        self._usage_of: dict[str, dict[str, Usage]] = {}
        self.changes = ChangeLog(_CLUSTER_LOG_KEEP)
        """A cluster's name each time its reservations change."""
        self.node_versions: dict[str, dict[str, int]] = {}
        """cluster -> node -> how often that node's reservations changed (read-only)."""
        self._node_logs: dict[str, ChangeLog] = {}

    def cluster_version(self, cluster: str) -> int:
        return self._versions.get(cluster, 0)

    def node_log(self, cluster: str) -> ChangeLog:
        """A node's name each time its reservations change, for one cluster."""
        log = self._node_logs.get(cluster)
        if log is None:
            log = self._node_logs[cluster] = ChangeLog(_NODE_LOG_KEEP)
        return log

    def _changed(self, cluster: str, usage: Usage) -> None:
        self._versions[cluster] = self._versions.get(cluster, 0) + 1
        self.changes.append(cluster)
        versions = self.node_versions.setdefault(cluster, {})
        log = self.node_log(cluster)
        for node in usage:
            versions[node] = versions.get(node, 0) + 1
            log.append(node)

    def reserve(self, cluster: str, job_uid: str, usage: Usage) -> None:
        super().reserve(cluster, job_uid, usage)  # releases an earlier reservation first
        self._usage_of.setdefault(job_uid, {})[cluster] = usage
        self._changed(cluster, usage)

    def release(self, job_uid: str) -> None:
        super().release(job_uid)
        for cluster, usage in self._usage_of.pop(job_uid, {}).items():
            self._changed(cluster, usage)

    def reconcile(self, snapshot: ClusterSnapshot) -> list[str]:
        seen = super().reconcile(snapshot)
        for uid in seen:
            held = self._usage_of.get(uid, {})
            usage = held.pop(snapshot.name, None)
            if not held:
                self._usage_of.pop(uid, None)
            if usage is not None:
                self._changed(snapshot.name, usage)
        return seen
