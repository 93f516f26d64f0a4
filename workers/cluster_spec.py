"""Declared capacity of a local or simulated cluster: `NAME:cpu=8,memory=16Gi,nodes=2`."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

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

    def pool(self) -> NodePool:
        return NodePool(
            [
                PoolNode(f"{self.name}-node-{i}", dict(self.allocatable), dict(self.labels))
                for i in range(self.nodes)
            ]
        )


def parse_cluster_spec(text: str) -> ClusterSpec:
    """`NAME[:key=value,...]`; keys are resources (cpu, memory, gpu, pods, any extended name),
    `nodes` (count, default 1; each node gets the resources), and `label.KEY=VALUE`."""
    name, _, rest = text.partition(":")
    if not name:
        raise ValueError(f"cluster spec {text!r} has no name")
    spec = ClusterSpec(name=name, allocatable={"cpu": Decimal(4), "memory": Decimal(8 * 2**30)})
    if rest:
        spec.allocatable = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"cluster spec {text!r}: {item!r} is not key=value")
        if key == "nodes":
            spec.nodes = int(value)
        elif key.startswith("label."):
            spec.labels[key.removeprefix("label.")] = value
        else:
            spec.allocatable[_ALIASES.get(key, key)] = parse_quantity(value)
    spec.allocatable.setdefault("pods", Decimal(110))
    return spec
