"""The hub's settings: heartbeat ages, loss and exclusion times, placement policy."""

from __future__ import annotations

from dataclasses import dataclass, field

from dispatcher.placement_config import PlacementConfig


@dataclass
class HubConfig:
    """A field named as a trainhub setting takes that setting (`TrainhubSettings.hub_config`):
    adding one is the field here, the setting, and its Helm value."""

    source: str = "trainhub/hub"
    max_heartbeat_age: float = 30.0
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    """Scoring weights, GPU label, priorities and per-queue limits."""
    schedule_interval: float = 1.0
    lost_after: float = 30.0
    """Seconds without a heartbeat after which a cluster is lost and its jobs re-dispatched."""
    exclusion_seconds: float = 300.0
    """How long a job avoids a cluster that lost it or handed it back (not when its worker
    handed it back because it stopped: the cluster did not fail the job)."""
    unavailable_cluster_wait: float = 900.0
    """Seconds a job waits while every cluster that could ever hold it is unavailable (its
    worker stopped, restarts, is silent or reports unhealthy) before it is rejected. A
    worker's rollout is "not now", never "never": a job pinned to that cluster waits."""
    waiting_status_interval: float = 30.0
    """Seconds a waiting job's published reason stands before a changed one goes out. Free
    amounts move with every heartbeat, and so do the reasons; publishing each change (with
    the whole decision) was one status per waiting job per pass: 500 statuses and 17 MB a
    second for 500 jobs waiting on 200 clusters."""
    finished_retention: float = 86400.0
    """Seconds a finished job stays in the hub's ledger after it ended (then it is forgotten,
    as Kubernetes garbage-collects a job object: `get` no longer finds it, its name is free,
    its history stays on the status topic). Bounds the hub's memory by the jobs of that
    window rather than every job it ever saw."""
