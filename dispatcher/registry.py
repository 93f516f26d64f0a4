"""The hub's live view of member clusters, fed by heartbeats."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from dispatcher.worker_instances import InstanceWatch
from schemas.cluster import ClusterSnapshot

log = logging.getLogger(__name__)


class ClusterRegistry:
    def __init__(self, max_heartbeat_age: float = 30.0) -> None:
        self.max_heartbeat_age = max_heartbeat_age
        self._clusters: dict[str, ClusterSnapshot] = {}
        self._listed: list[ClusterSnapshot] | None = None
        """`all()`, kept between heartbeats: every decision reads it."""
        self.instances = InstanceWatch(max_heartbeat_age)
        self._conflicts: set[str] = set()

    def update(self, snapshot: ClusterSnapshot, *, replaying: bool = False) -> bool:
        """Keep the newest snapshot per cluster; False when this one is older than ours.
        A name two worker processes report in turns is kept unhealthy, with the reason;
        a conflict starting or ending is logged, except while `replaying` (see `replayed`)."""
        observed = _observed_at(snapshot)
        if observed is not None:
            self.instances.observe(snapshot.name, snapshot.instance, observed)
        known = self._clusters.get(snapshot.name)
        if (
            known is not None
            and snapshot.sequence < known.sequence
            and snapshot.observedAt
            and (known.observedAt and snapshot.observedAt <= known.observedAt)
        ):
            return False
        conflict = None
        if observed is not None:
            conflict = self.instances.conflict(snapshot.name, observed)
        if not replaying:
            self._note_conflict(snapshot.name, conflict)
        if conflict is not None:
            snapshot = snapshot.model_copy(update={"healthy": False, "unhealthyReason": conflict})
        self._clusters[snapshot.name] = snapshot
        self._listed = None
        return True

    def replayed(self, now: datetime | None = None) -> None:
        """After replaying the clusters topic: log the conflicts of the clusters whose newest
        heartbeat is fresh. The topic's uncompacted tail can hold a conflict that ended long
        ago; logged during the replay, it was an error about the past, then a "placing there
        again" at the first live heartbeat."""
        now = now or datetime.now(UTC)
        for name, snapshot in self._clusters.items():
            observed = _observed_at(snapshot)
            if observed is None or not self.is_fresh(snapshot, now):
                continue
            self._note_conflict(name, self.instances.conflict(name, observed))

    def _note_conflict(self, cluster: str, conflict: str | None) -> None:
        if conflict is not None and cluster not in self._conflicts:
            self._conflicts.add(cluster)
            log.error("not placing on %s: %s", cluster, conflict, extra={"cluster": cluster})
        elif conflict is None and cluster in self._conflicts:
            self._conflicts.discard(cluster)
            log.warning(
                "one worker process reports %s again: placing there again",
                cluster,
                extra={"cluster": cluster},
            )

    def retire(self, name: str) -> bool:
        """Forget the cluster (until a heartbeat registers it again); False if unknown."""
        if self._clusters.pop(name, None) is None:
            return False
        self._listed = None
        self._conflicts.discard(name)
        return True

    def get(self, name: str) -> ClusterSnapshot | None:
        return self._clusters.get(name)

    def all(self) -> list[ClusterSnapshot]:
        """Every cluster's newest snapshot, by name (a fresh list: callers may keep it)."""
        if self._listed is None:
            self._listed = [self._clusters[n] for n in sorted(self._clusters)]
        return list(self._listed)

    def is_fresh(self, snapshot: ClusterSnapshot, now: datetime | None = None) -> bool:
        return snapshot.age_seconds(now or datetime.now(UTC)) <= self.max_heartbeat_age


def _observed_at(snapshot: ClusterSnapshot) -> datetime | None:
    """The snapshot's observation time, naive times read as UTC."""
    observed = snapshot.observedAt
    if observed is not None and observed.tzinfo is None:
        observed = observed.replace(tzinfo=UTC)
    return observed
