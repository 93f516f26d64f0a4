"""The hub's live view of member clusters, fed by heartbeats."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.cluster import ClusterSnapshot


class ClusterRegistry:
    def __init__(self, max_heartbeat_age: float = 30.0) -> None:
        self.max_heartbeat_age = max_heartbeat_age
        self._clusters: dict[str, ClusterSnapshot] = {}
        self._listed: list[ClusterSnapshot] | None = None
        """`all()`, kept between heartbeats: every decision reads it."""

    def update(self, snapshot: ClusterSnapshot) -> bool:
        """Keep the newest snapshot per cluster; False when this one is older than ours."""
        known = self._clusters.get(snapshot.name)
        if (
            known is not None
            and snapshot.sequence < known.sequence
            and snapshot.observedAt
            and (known.observedAt and snapshot.observedAt <= known.observedAt)
        ):
            return False
        self._clusters[snapshot.name] = snapshot
        self._listed = None
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
