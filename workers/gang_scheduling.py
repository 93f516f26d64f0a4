"""Gang scheduling inside a member cluster: the job's PodGroup as the Training Operator v1.9
makes it for Volcano or for scheduler-plugins' coscheduling, and what each pod carries to join
it (its schedulerName, the group label or annotations)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, cast, get_args

from schemas.kubeflow import AnyJob
from schemas.pod import Container
from schemas.quantity import QuantityError, format_quantity, parse_quantity

GangSchedulerKind = Literal["volcano", "scheduler-plugins"]
GANG_SCHEDULERS: tuple[str, ...] = get_args(GangSchedulerKind)

VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
"""Volcano: the pod's PodGroup, by name (volcano.sh/apis `KubeGroupNameAnnotationKey`)."""
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
"""Volcano: the pod's replica type, lowercase (`TaskSpecKey`)."""
SCHEDULER_PLUGINS_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""scheduler-plugins' coscheduling: the pod's PodGroup, by name (`PodGroupLabel`)."""

DEFAULT_SCHEDULER_NAMES: dict[str, str] = {
    "volcano": "volcano",
    "scheduler-plugins": "scheduler-plugins-scheduler",
}
"""The pods' schedulerName unless `--gang-scheduler-name` says otherwise. Volcano's is fixed
upstream; for scheduler-plugins upstream takes its `--gang-scheduler-name` value, and this is
the name scheduler-plugins' own second-scheduler deployment gives its profile."""
VOLCANO_DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class PodGroupApi:
    """Where a scheduler's PodGroups live in the API."""

    group: str
    version: str
    plural: str = "podgroups"
    kind: str = "PodGroup"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


POD_GROUP_APIS: dict[str, PodGroupApi] = {
    "volcano": PodGroupApi("scheduling.volcano.sh", "v1beta1"),
    "scheduler-plugins": PodGroupApi("scheduling.x-k8s.io", "v1alpha1"),
}


@dataclass(frozen=True)
class GangScheduling:
    """A worker's gang scheduler: which PodGroups it makes and the scheduler its pods ask for."""

    scheduler: GangSchedulerKind
    scheduler_name: str

    @classmethod
    def of(cls, scheduler: str | None, scheduler_name: str | None = None) -> GangScheduling | None:
        """From the settings `gang_scheduler` and `gang_scheduler_name` (None: no gangs);
        ValueError naming the choices."""
        if scheduler is None or scheduler in ("", "none", "None"):
            if scheduler_name:
                raise ValueError("--gang-scheduler-name needs --gang-scheduler")
            return None
        if scheduler not in GANG_SCHEDULERS:
            choices = " or ".join(GANG_SCHEDULERS)
            raise ValueError(f"--gang-scheduler: {scheduler!r} is not {choices}")
        kind = cast(GangSchedulerKind, scheduler)
        return cls(kind, scheduler_name or DEFAULT_SCHEDULER_NAMES[kind])

    @property
    def api(self) -> PodGroupApi:
        return POD_GROUP_APIS[self.scheduler]

    def pod_labels(self, group: str) -> dict[str, str]:
        """Labels every pod of the group carries (on top of its own)."""
        if self.scheduler == "scheduler-plugins":
            return {SCHEDULER_PLUGINS_GROUP_LABEL: group}
        return {}

    def pod_annotations(self, group: str, replica_type: str) -> dict[str, str]:
        """Annotations every pod of the group carries (on top of its own)."""
        if self.scheduler == "volcano":
            return {
                VOLCANO_GROUP_ANNOTATION: group,
                VOLCANO_TASK_ANNOTATION: replica_type.lower(),
            }
        return {}


@dataclass(frozen=True)
class GangMember:
    """One replica type as the group's minResources counts it: upstream orders the types by
    their pod template's PriorityClass (highest first) and takes pods until minMember."""

    replica_type: str
    replicas: int
    priority_class: str | None
    requests: Mapping[str, Decimal]
    """One pod's: each container's requests, or its limits where it gives no requests."""


@dataclass
class PodGroupPlan:
    """The job's PodGroup: named as the job, in its namespace, with the job's annotations."""

    gang: GangScheduling
    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    min_member: int
    queue: str
    priority_class: str | None
    schedule_timeout_seconds: int | None
    min_resources: dict[str, Decimal] | None
    """The job's `schedulingPolicy.minResources`; None: computed from `members`."""
    members: tuple[GangMember, ...] = field(default_factory=tuple)

    def priority_classes(self) -> set[str]:
        """The PriorityClasses whose values order the computed minResources: none when the job
        gives them, or when every pod counts anyway."""
        if self.min_resources is not None:
            return set()
        if self.min_member >= sum(m.replicas for m in self.members):
            return set()
        return {m.priority_class for m in self.members if m.priority_class}

    def resources(self, priorities: Mapping[str, int] | None = None) -> dict[str, Decimal]:
        """minResources: the job's, or the requests of its first `min_member` pods, replica
        types taken by PriorityClass value (highest first; a class unknown, 0), then in the
        job's order (upstream's order among equals is Go's random map order)."""
        if self.min_resources is not None:
            return dict(self.min_resources)
        values = priorities or {}
        ordered = sorted(
            self.members,
            key=lambda m: -values.get(m.priority_class or "", 0),
        )
        total: dict[str, Decimal] = {}
        counted = 0
        for member in ordered:
            for _ in range(member.replicas):
                if counted >= self.min_member:
                    return total
                counted += 1
                for name, amount in member.requests.items():
                    total[name] = total.get(name, Decimal(0)) + amount
        return total

    def spec(
        self,
        priorities: Mapping[str, int] | None = None,
        existing: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The PodGroup's spec as upstream writes it (whole, on create and on every update);
        `existing`: the spec found in the cluster, whose Volcano queue upstream keeps."""
        resources = {k: format_quantity(v) for k, v in self.resources(priorities).items()}
        spec: dict[str, Any] = {}
        if self.min_member:
            spec["minMember"] = self.min_member
        if self.gang.scheduler == "volcano":
            kept = (existing or {}).get("queue")
            spec["queue"] = kept if isinstance(kept, str) and kept else self.queue
            if self.priority_class:
                spec["priorityClassName"] = self.priority_class
            spec["minResources"] = resources  # a pointer upstream: present even when empty
            return spec
        if resources:
            spec["minResources"] = resources
        if self.schedule_timeout_seconds is not None:
            spec["scheduleTimeoutSeconds"] = self.schedule_timeout_seconds
        return spec

    def manifest(self, priorities: Mapping[str, int] | None = None) -> dict[str, Any]:
        api = self.gang.api
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": dict(self.labels),
        }
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        return {
            "apiVersion": api.api_version,
            "kind": api.kind,
            "metadata": metadata,
            "spec": self.spec(priorities),
        }


def same_spec(wanted: Mapping[str, Any], found: Mapping[str, Any]) -> bool:
    """Whether a PodGroup's spec in the cluster already says what `wanted` says (quantities
    compared by value: `1Gi` is `1024Mi`)."""
    return _comparable(wanted) == _comparable(found)


def _comparable(spec: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(spec)
    resources = result.pop("minResources", None) or {}
    try:
        result["minResources"] = {k: parse_quantity(v) for k, v in resources.items()}
    except (QuantityError, AttributeError):
        result["minResources"] = resources
    if not result.get("minMember"):
        result.pop("minMember", None)
    return result


def pod_requests(containers: Iterable[Container]) -> dict[str, Decimal]:
    """One pod's resources as upstream's `AddResourceList` sums them: per container its
    requests, or its limits when it gives no requests at all (init containers not counted)."""
    total: dict[str, Decimal] = {}
    for container in containers:
        resources = container.resources
        if resources is None:
            continue
        counted = resources.requests if resources.requests is not None else resources.limits
        for name, amount in (counted or {}).items():
            total[name] = total.get(name, Decimal(0)) + amount
    return total


def pod_group_plan(job: AnyJob, gang: GangScheduling, labels: Mapping[str, str]) -> PodGroupPlan:
    """The job's PodGroup: minMember from `schedulingPolicy.minAvailable` or every replica,
    queue (Volcano; `default` unless given), priorityClassName (Volcano),
    scheduleTimeoutSeconds (scheduler-plugins), minResources given or computed."""
    policy = job.run_policy.schedulingPolicy
    members = tuple(
        GangMember(
            replica_type=rtype,
            replicas=job.replicas_of(rtype),
            priority_class=(job.replica_specs[rtype].template.spec.model_extra or {}).get(
                "priorityClassName"
            ),
            requests=pod_requests(job.replica_specs[rtype].template.spec.containers),
        )
        for rtype in job.replica_specs
    )
    total = sum(m.replicas for m in members)
    min_member = total
    queue = VOLCANO_DEFAULT_QUEUE
    priority_class = None
    timeout = None
    min_resources = None
    if policy is not None:
        if policy.minAvailable is not None:
            min_member = policy.minAvailable
        queue = policy.queue or queue
        priority_class = policy.priorityClass or None
        timeout = policy.scheduleTimeoutSeconds
        if policy.minResources is not None:
            min_resources = dict(policy.minResources)
    return PodGroupPlan(
        gang=gang,
        name=job.metadata.name,
        namespace=job.metadata.namespace,
        labels=dict(labels),
        annotations=dict(job.metadata.annotations or {}),
        min_member=min_member,
        queue=queue,
        priority_class=priority_class,
        schedule_timeout_seconds=timeout,
        min_resources=min_resources,
        members=members,
    )
