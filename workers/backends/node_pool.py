"""Declared nodes with per-node accounting, for backends that schedule pods themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from schemas.cluster import NodeSnapshot, Taint


@dataclass
class PoolNode:
    name: str
    allocatable: dict[str, Decimal]
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    bound: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    """pod key -> requests of the pods bound here"""
    ports: dict[str, frozenset[str]] = field(default_factory=dict)
    """pod key -> host ports of the pods bound here that hold any"""

    def held_ports(self) -> set[str]:
        held: set[str] = set()
        for ports in self.ports.values():
            held |= ports
        return held

    def requested(self) -> dict[str, Decimal]:
        total: dict[str, Decimal] = {}
        for requests in self.bound.values():
            for resource, amount in requests.items():
                total[resource] = total.get(resource, Decimal(0)) + amount
        if "pods" in self.allocatable:
            total["pods"] = Decimal(len(self.bound))
        return total

    def fits(self, requests: dict[str, Decimal], ports: frozenset[str] = frozenset()) -> bool:
        if ports and not ports.isdisjoint(self.held_ports()):
            return False
        used = self.requested()
        needs = dict(requests)
        if "pods" in self.allocatable:
            needs["pods"] = needs.get("pods", Decimal(0)) + 1
        return all(
            used.get(r, Decimal(0)) + amount <= self.allocatable.get(r, Decimal(0))
            for r, amount in needs.items()
            if amount > 0
        )

    def snapshot(self) -> NodeSnapshot:
        return NodeSnapshot(
            name=self.name,
            allocatable=dict(self.allocatable),
            requested=self.requested(),
            labels=dict(self.labels),
            taints=list(self.taints),
            hostPorts=sorted(self.held_ports()),
        )


class NodePool:
    def __init__(self, nodes: list[PoolNode]) -> None:
        self.nodes = nodes

    def bind(
        self,
        pod_key: str,
        requests: dict[str, Decimal],
        selector: dict[str, str],
        ports: frozenset[str] = frozenset(),
    ) -> str | None:
        """Bind to the first node that fits; None when none does right now."""
        for node in self.nodes:
            if all(node.labels.get(k) == v for k, v in selector.items()) and node.fits(
                requests, ports
            ):
                node.bound[pod_key] = requests
                if ports:
                    node.ports[pod_key] = ports
                return node.name
        return None

    def unbind(self, pod_key: str) -> None:
        for node in self.nodes:
            node.bound.pop(pod_key, None)
            node.ports.pop(pod_key, None)

    def snapshots(self) -> list[NodeSnapshot]:
        return [n.snapshot() for n in self.nodes]
