"""What a worker says about its cluster in heartbeats, and how often and how late it may."""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.cluster import ClusterPolicy
from workers.gang_scheduling import GangScheduling

_OVERDUE_INTERVALS = 3
_OVERDUE_SLACK = 2.0


@dataclass
class WorkerConfig:
    """A field named as a trainhub setting takes that setting (`TrainhubSettings.worker_config`);
    the cluster's own (labels, namespaces, weight, cost, policy) come with the worker."""

    cluster: str
    heartbeat_interval: float = 5.0
    labels: dict[str, str] | None = None
    namespaces: list[str] | None = None
    unschedulable_timeout: float = 120.0
    """Seconds a job's pods may stay unschedulable before the job is handed back."""
    weight: float | None = None
    """The operator's static preference for this cluster, 0..100 (cluster-weight score)."""
    cost: float | None = None
    """Relative price of running here (cost score: cheaper scores higher)."""
    policy: ClusterPolicy = field(default_factory=ClusterPolicy)
    """What pods may ask of this cluster's nodes (privileged, hostPath, ...)."""
    run_retention: float = 60.0
    """Seconds a finished run stays in the worker's hands after it finished (an assignment
    redelivered meanwhile finds it and starts nothing); then it leaves, and only a pending
    ttlSecondsAfterFinished is remembered of it (its objects are found by their labels)."""
    overdue_after: float | None = None
    """Seconds after the last reported capacity read past which the hub may have taken this
    cluster's jobs away (a failed heartbeat counts too): the worker then deletes the jobs no
    longer assigned here before it reports again. Default: three heartbeat intervals, and at
    least one interval plus two seconds; keep it below the hub's `max_heartbeat_age`."""

    mode: str = "direct"
    """`direct`: the worker makes each job's pods; `delegate`: it hands each job to the
    cluster's Training Operator (a delegating backend, kube only)."""

    gang_scheduler: str | None = None
    """`volcano` or `scheduler-plugins`: each job gets that scheduler's PodGroup before its
    pods, which ask for the scheduler (kube backend only). None: kube-scheduler binds a job's
    pods one by one."""
    gang_scheduler_name: str | None = None
    """The schedulerName the pods ask for (default: `volcano`, `scheduler-plugins-scheduler`)."""

    @property
    def gang_scheduling(self) -> GangScheduling | None:
        """The gang scheduler these settings name (ValueError: not one)."""
        return GangScheduling.of(self.gang_scheduler, self.gang_scheduler_name)

    @property
    def source(self) -> str:
        return f"trainhub/worker/{self.cluster}"

    @property
    def heartbeat_overdue_after(self) -> float:
        if self.overdue_after is not None:
            return self.overdue_after
        interval = self.heartbeat_interval
        return max(_OVERDUE_INTERVALS * interval, interval + _OVERDUE_SLACK)
