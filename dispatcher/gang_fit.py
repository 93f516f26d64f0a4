"""Per-node bin packing of a whole gang: every pod of the job on some node at the same time.

A cluster with enough capacity in sum but not on any single node must be refused, so pods
are packed onto concrete nodes (largest first, best fit) rather than summed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from dispatcher.demand import PodDemand
from schemas.cluster import NodeSnapshot, Taint
from schemas.pod import Toleration
from schemas.quantity import format_quantity

Usage = dict[str, dict[str, Decimal]]
"""node name -> resource -> amount"""

_POD_SLOT = "pods"


@dataclass
class NodeRoom:
    """A node's room for new pods: what is left after running pods and reservations."""

    name: str
    free: dict[str, Decimal]
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)

    @classmethod
    def of(
        cls, node: NodeSnapshot, *, empty: bool = False, reserved: dict[str, Decimal] | None = None
    ) -> NodeRoom:
        free = (
            dict(node.allocatable)
            if empty
            else {r: node.free(r) - (reserved or {}).get(r, Decimal(0)) for r in node.allocatable}
        )
        return cls(node.name, free, dict(node.labels), list(node.taints))


@dataclass
class FitResult:
    fits: bool
    usage: Usage = field(default_factory=dict)
    reason: str | None = None


def tolerates(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    if taint.effect == "PreferNoSchedule":
        return True
    for tol in tolerations:
        if tol.effect and tol.effect != taint.effect:
            continue
        if tol.operator == "Exists" and (tol.key is None or tol.key == taint.key):
            return True
        if tol.key == taint.key and (tol.value or "") == (taint.value or ""):
            return True
    return False


def admission_problem(node: NodeRoom, demand: PodDemand) -> str | None:
    for key, value in demand.node_selector.items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    for taint in node.taints:
        if not tolerates(demand.tolerations, taint):
            return f"untolerated taint {taint.key}={taint.value or ''}:{taint.effect}"
    return None


def _needs(demand: PodDemand, node: NodeRoom) -> dict[str, Decimal]:
    needs = dict(demand.requests)
    if _POD_SLOT in node.free:
        needs[_POD_SLOT] = needs.get(_POD_SLOT, Decimal(0)) + 1
    return needs


def _room_after(node: NodeRoom, needs: dict[str, Decimal]) -> Decimal | None:
    """The smallest slack left after placing; None when something does not fit."""
    slack: Decimal | None = None
    for resource, amount in needs.items():
        if amount <= 0:
            continue
        left = node.free.get(resource, Decimal(0)) - amount
        if left < 0:
            return None
        slack = left if slack is None else min(slack, left)
    return slack if slack is not None else Decimal(0)


def _shortage(nodes: list[NodeRoom], demand: PodDemand, placed: int) -> str:
    """Why the next pod of `demand` has no room; `nodes` is the room before the gang."""
    admitting = [n for n in nodes if admission_problem(n, demand) is None]
    if not admitting:
        problems = sorted({admission_problem(n, demand) or "" for n in nodes})
        detail = "; ".join(problems) if nodes else "the cluster has no nodes"
        return f"no node admits {demand.replica_type} pods ({detail})"
    short = []
    for resource, amount in _needs(demand, admitting[0]).items():
        best = max(n.free.get(resource, Decimal(0)) for n in admitting)
        if best < amount:
            short.append(
                f"{resource}: needs {format_quantity(amount)} per pod, "
                f"most on one node {format_quantity(max(best, Decimal(0)))}"
            )
    if short:
        return f"{demand.replica_type} pod does not fit on any node ({'; '.join(short)})"
    return (
        f"not enough nodes for the whole gang at once: room for {placed} of "
        f"{demand.count} {demand.replica_type} pods next to the other replicas"
    )


def _size(demand: PodDemand) -> tuple[Decimal, ...]:
    return tuple(sorted(demand.requests.values(), reverse=True))


def gang_fit(nodes: list[NodeRoom], demands: list[PodDemand]) -> FitResult:
    """Place every pod of the job on the given nodes, or say why that is impossible."""
    rooms = [NodeRoom(n.name, dict(n.free), n.labels, n.taints) for n in nodes]
    usage: Usage = {}
    for demand in sorted(demands, key=_size, reverse=True):
        for placed in range(demand.count):
            best: tuple[Decimal, NodeRoom, dict[str, Decimal]] | None = None
            for room in rooms:
                if admission_problem(room, demand) is not None:
                    continue
                needs = _needs(demand, room)
                slack = _room_after(room, needs)
                if slack is not None and (best is None or slack < best[0]):
                    best = (slack, room, needs)
            if best is None:
                return FitResult(False, reason=_shortage(nodes, demand, placed))
            _, room, needs = best
            node_usage = usage.setdefault(room.name, {})
            for resource, amount in needs.items():
                room.free[resource] = room.free.get(resource, Decimal(0)) - amount
                node_usage[resource] = node_usage.get(resource, Decimal(0)) + amount
    return FitResult(True, usage=usage)
