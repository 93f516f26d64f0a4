"""Which worker processes report each cluster name: two taking turns is a misconfiguration.

A copied worker Deployment left with the original's `--cluster` makes two workers report
one name. Their heartbeats take turns, so the hub's view of that cluster's capacity flips
between two real clusters, and both consume its assignments. Every worker process reports a
random `instance`; a restart replaces one instance for good, whereas an instance that was
replaced and reports again means two processes. The hub stops placing there until that has
not happened for a while (`window`).

Times are the heartbeats' own `observedAt`, so replaying old heartbeats at start-up does
not revive a conflict that ended long ago.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass
class _Reports:
    current: str | None = None
    seen: dict[str, datetime] = field(default_factory=dict)
    """instance -> its latest heartbeat, within the window."""
    took_turns_at: datetime | None = None
    pair: tuple[str, str] = ("", "")


class InstanceWatch:
    def __init__(self, window: float) -> None:
        self.window = timedelta(seconds=window)
        self._clusters: dict[str, _Reports] = {}

    def observe(self, cluster: str, instance: str | None, observed: datetime) -> None:
        if instance is None:
            return  # a worker from before instances were reported
        reports = self._clusters.setdefault(cluster, _Reports())
        last = reports.seen.get(instance)
        if (
            reports.current is not None
            and instance != reports.current
            and last is not None
            and observed - last <= self.window
        ):
            reports.took_turns_at = observed
            reports.pair = (reports.current, instance)
        reports.current = instance
        reports.seen[instance] = observed
        horizon = observed - self.window
        for known in [i for i, at in reports.seen.items() if at < horizon]:
            del reports.seen[known]

    def conflict(self, cluster: str, now: datetime) -> str | None:
        """Why the cluster is not to be placed on now; None when one worker reports it."""
        reports = self._clusters.get(cluster)
        if reports is None or reports.took_turns_at is None:
            return None
        if now - reports.took_turns_at > self.window:
            return None
        first, second = sorted(reports.pair)
        return (
            f"two worker processes report this cluster (instances {first} and {second}): "
            "check for a duplicated worker deployment with the same --cluster"
        )
