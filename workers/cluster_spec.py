"""Declared capacity of a local or simulated cluster: `NAME:cpu=8,memory=16Gi,nodes=2`."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from schemas.cluster import ClusterPolicy, PodSecurityLevel, pod_security_level
from schemas.names import DNS1123_LABEL, label_problem
from schemas.pod import is_extended_resource
from schemas.quantity import parse_quantity
from workers.backends.node_pool import NodePool, PoolNode

_ALIASES = {"gpu": "nvidia.com/gpu"}


@dataclass
class ClusterSpec:
    name: str
    nodes: int = 1
    allocatable: dict[str, Decimal] = field(default_factory=dict)
    """Per node."""
    labels: dict[str, str] = field(default_factory=dict)
    policy: ClusterPolicy = field(default_factory=ClusterPolicy)
    """What its pods may ask of the nodes (`allow=hostNetwork`...)."""

    def pool(self) -> NodePool:
        return NodePool(
            [
                PoolNode(f"{self.name}-node-{i}", dict(self.allocatable), dict(self.labels))
                for i in range(self.nodes)
            ]
        )


def check_cluster_name(name: str) -> None:
    """ValueError unless `name` can name a cluster: it becomes part of topic names, node
    names and every status, and the hub's snapshots accept DNS-1123 labels only."""
    if not DNS1123_LABEL.match(name) or len(name) > 63:
        raise ValueError(
            f"cluster name {name!r} is not a DNS-1123 label (at most 63 lower-case letters, "
            "digits and '-', starting and ending with a letter or digit)"
        )


def parse_cluster_spec(text: str) -> ClusterSpec:
    """`NAME[:key=value,...]`; keys are resources (cpu, memory, gpu, pods, any extended name;
    none given: cpu=4,memory=8Gi), `nodes` (count, default 1; each node gets the resources),
    `label.KEY=VALUE`, `pod-security=LEVEL` (privileged, baseline or restricted: the Pod
    Security Standards level its pods are checked at, default baseline) and
    `allow=PRIVILEGE` (privileged, hostPath, hostNetwork, hostPID, hostIPC or hostPorts;
    repeatable), which the cluster's pods may then ask for on top of the level."""
    name, _, rest = text.partition(":")
    if not name:
        raise ValueError(f"cluster spec {text!r} has no name")
    check_cluster_name(name)
    spec = ClusterSpec(name=name, allocatable={"cpu": Decimal(4), "memory": Decimal(8 * 2**30)})
    sized = False  # the default size stands until a resource is given
    allowed: list[str] = []
    level: PodSecurityLevel = "baseline"
    given: set[str] = set()
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"cluster spec {text!r}: {item!r} is not key=value")
        named = _ALIASES.get(key, key)  # gpu and nvidia.com/gpu are one resource
        if named in given and key != "allow":
            raise ValueError(f"cluster spec {text!r}: {key} is given twice")
        given.add(named)
        if key == "nodes":
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"cluster spec {text!r}: nodes must be a count of at least 1")
            spec.nodes = int(value)
        elif key.startswith("label."):
            problem = label_problem(key.removeprefix("label."), value)
            if problem is not None:
                raise ValueError(f"cluster spec {text!r}: {problem}")
            spec.labels[key.removeprefix("label.")] = value
        elif key == "allow":
            allowed.append(value)
        elif key == "pod-security":
            try:
                level = pod_security_level(value)
            except ValueError as exc:
                raise ValueError(f"cluster spec {text!r}: {exc}") from exc
        else:
            if not sized:
                spec.allocatable, sized = {}, True
            try:
                amount = parse_quantity(value)
            except ValueError as exc:
                raise ValueError(f"cluster spec {text!r}: {key}: {exc}") from exc
            if amount < 0:
                raise ValueError(f"cluster spec {text!r}: {key} cannot be negative ({value})")
            resource = _ALIASES.get(key, key)
            if is_extended_resource(resource) and amount != amount.to_integral_value():
                raise ValueError(
                    f"cluster spec {text!r}: {key}: an extended resource is a whole number "
                    f"(got {value})"
                )
            spec.allocatable[resource] = amount
    try:
        spec.policy = ClusterPolicy.allowing(allowed, level)
    except ValueError as exc:
        raise ValueError(f"cluster spec {text!r}: {exc}") from exc
    if sized and not {"cpu", "memory"} <= spec.allocatable.keys():
        missing = sorted({"cpu", "memory"} - spec.allocatable.keys())
        raise ValueError(
            f"cluster spec {text!r}: no {' or '.join(missing)} given (a misspelt key such as "
            "'mem' is taken as a resource of that name)"
        )
    spec.allocatable.setdefault("pods", Decimal(110))
    return spec
