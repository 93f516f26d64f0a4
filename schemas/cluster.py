"""`ClusterSnapshot`: the heartbeat a worker publishes with its cluster's free capacity."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.host_ports import PROTOCOL, port_key
from schemas.names import DNS1123_LABEL_PATTERN
from schemas.quantity import ResourceList


class Taint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=317)
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodeSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=253)
    allocatable: ResourceList
    requested: ResourceList = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    hostPorts: list[str] = Field(
        default_factory=list,
        max_length=4096,
        description="Host ports its pods hold, PROTOCOL/PORT (schemas/host_ports.py): a pod "
        "holding one of them does not fit here.",
    )

    @field_validator("hostPorts")
    @classmethod
    def _ports(cls, ports: list[str]) -> list[str]:
        checked = []
        for port in ports:
            protocol, _, number = port.partition("/")
            if not (PROTOCOL.fullmatch(protocol) and number.isdigit() and 0 < int(number) < 65536):
                raise ValueError(f"{port!r} is not PROTOCOL/PORT, as TCP/23456 (ports 1-65535)")
            checked.append(port_key(protocol, int(number)))
        return checked

    def free(self, resource: str) -> Decimal:
        """Free amount of a resource; a resource missing from `requested` counts as zero."""
        return self.allocatable.get(resource, Decimal(0)) - self.requested.get(resource, Decimal(0))


PodSecurityLevel = Literal["privileged", "baseline", "restricted"]
"""The Kubernetes Pod Security Standards levels, least to most restrictive."""
POD_SECURITY_LEVELS: tuple[PodSecurityLevel, ...] = ("privileged", "baseline", "restricted")


def pod_security_level(name: str) -> PodSecurityLevel:
    """`name` as a Pod Security Standards level; ValueError names the known ones."""
    for level in POD_SECURITY_LEVELS:
        if name == level:
            return level
    raise ValueError(
        f"unknown pod security level {name!r}; known: {', '.join(POD_SECURITY_LEVELS)}"
    )


class ClusterPolicy(BaseModel):
    """What pods may ask of this cluster's nodes: the Pod Security Standards level its pods
    are held to (as the Kubernetes Pod Security admission checks it), and the host privileges
    allowed on top of that level."""

    model_config = ConfigDict(extra="forbid")

    podSecurity: PodSecurityLevel = "baseline"
    allowPrivileged: bool = False
    allowHostPath: bool = False
    allowHostNetwork: bool = False
    allowHostPID: bool = False
    allowHostIPC: bool = False
    allowHostPorts: bool = False

    @classmethod
    def allowing(
        cls, names: Iterable[str], podSecurity: PodSecurityLevel = "baseline"
    ) -> ClusterPolicy:
        """The policy at level `podSecurity` allowing exactly `names` on top (privileged,
        hostPath, hostNetwork, hostPID, hostIPC, hostPorts, as `trainhub worker --allow`
        takes them); ValueError names an unknown one."""
        fields: dict[str, bool] = {}
        for name in names:
            field_name = ALLOWANCES.get(name)
            if field_name is None:
                raise ValueError(f"unknown pod privilege {name!r}; known: {', '.join(ALLOWANCES)}")
            fields[field_name] = True
        return cls(podSecurity=podSecurity, **fields)


ALLOWANCES: dict[str, str] = {
    "privileged": "allowPrivileged",
    "hostPath": "allowHostPath",
    "hostNetwork": "allowHostNetwork",
    "hostPID": "allowHostPID",
    "hostIPC": "allowHostIPC",
    "hostPorts": "allowHostPorts",
}
"""The exceptions a cluster may allow on top of its level, by the name `--allow` takes, with
the ClusterPolicy field each sets."""


class ClusterSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=63, pattern=DNS1123_LABEL_PATTERN)
    healthy: bool = True
    observedAt: datetime | None = Field(
        default=None, description="When the capacity was read; absent in files means fresh."
    )
    nodes: list[NodeSnapshot] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    namespaces: list[str] | None = Field(
        default=None, description="Namespaces this cluster accepts jobs for; None means all."
    )
    backend: str | None = None
    jobs: list[str] = Field(
        default_factory=list, description="Uids of the jobs whose pods `requested` counts."
    )
    sequence: int = Field(default=0, ge=0)
    instance: str | None = Field(
        default=None,
        max_length=64,
        description="The reporting worker process, random per start: the hub refuses to place "
        "on a name two processes report in turns.",
    )
    unhealthyReason: str | None = Field(
        default=None, max_length=1024, description="Why `healthy` is false, when known."
    )
    policy: ClusterPolicy = Field(default_factory=ClusterPolicy)
    weight: float | None = Field(
        default=None,
        ge=0,
        le=100,
        allow_inf_nan=False,
        description="Operator preference 0..100 (the cluster-weight score); None is neutral (50).",
    )
    cost: float | None = Field(
        default=None,
        ge=0,
        le=1e12,
        allow_inf_nan=False,
        description="Relative price of running here (the cost score: cheaper scores higher).",
    )

    def age_seconds(self, now: datetime | None = None) -> float:
        if self.observedAt is None:
            return 0.0
        now = now or datetime.now(UTC)
        observed = self.observedAt
        if observed.tzinfo is None:
            observed = observed.replace(tzinfo=UTC)
        return max(0.0, (now - observed).total_seconds())

    def total(self, resource: str) -> Decimal:
        return sum((n.allocatable.get(resource, Decimal(0)) for n in self.nodes), Decimal(0))

    def free(self, resource: str) -> Decimal:
        return sum((max(n.free(resource), Decimal(0)) for n in self.nodes), Decimal(0))


class ClustersFile(BaseModel):
    """The YAML that `trainhub plan --clusters` reads: `{clusters: [ClusterSnapshot, ...]}`."""

    model_config = ConfigDict(extra="forbid")

    clusters: list[ClusterSnapshot]

    @model_validator(mode="after")
    def _names_differ(self) -> ClustersFile:
        _once("clusters", [c.name for c in self.clusters])
        for index, snapshot in enumerate(self.clusters):
            _once(f"clusters[{index}].nodes", [n.name for n in snapshot.nodes])
        return self


def _once(where: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{where}: the name {name!r} is given twice")
        seen.add(name)
