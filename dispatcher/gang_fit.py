"""Per-node bin packing of a whole gang: every pod of the job on some node at the same time.

A cluster with enough capacity in sum but not on any single node must be refused, so pods
are packed onto concrete nodes (largest first, best fit) rather than summed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import InvalidOperation

from dispatcher.amounts import Amount, compact_all
from dispatcher.demand import PodDemand, packing_order
from dispatcher.port_rooms import is_port_resource, port_of
from schemas.cluster import NodeSnapshot, Taint
from schemas.pod import Toleration
from schemas.quantity import format_quantity

Usage = dict[str, dict[str, Amount]]
"""node name -> resource -> amount"""

_POD_SLOT = "pods"


@dataclass
class NodeRoom:
    """A node's room for new pods: what is left after running pods and reservations."""

    name: str
    free: dict[str, Amount]
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)

    @classmethod
    def of(
        cls, node: NodeSnapshot, *, empty: bool = False, reserved: dict[str, Amount] | None = None
    ) -> NodeRoom:
        free = compact_all(
            node.allocatable
            if empty
            else {r: node.free(r) - (reserved or {}).get(r, 0) for r in node.allocatable}
        )
        return cls(node.name, free, dict(node.labels), list(node.taints))


@dataclass
class FitResult:
    fits: bool
    usage: Usage = field(default_factory=dict)
    reason: str | None = None
    certain: bool = True
    """For a gang that does not fit: False when the search for a packing gave up."""


def tolerates(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    if taint.effect == "PreferNoSchedule":
        return True
    for tol in tolerations:
        if tol.effect and tol.effect != taint.effect:
            continue
        # An empty key with Exists matches every taint (as a key left out does).
        if tol.operator == "Exists" and (not tol.key or tol.key == taint.key):
            return True
        if tol.key == taint.key and (tol.value or "") == (taint.value or ""):
            return True
    return False


def admission_problem(node: NodeRoom | NodeSnapshot, demand: PodDemand) -> str | None:
    if demand.problem is not None:
        return demand.problem
    for key, value in demand.node_selector.items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    if demand.required_terms and not any(
        term.matches(node.name, node.labels) for term in demand.required_terms
    ):
        terms = " or ".join(f"({term})" for term in demand.required_terms)
        return f"required nodeAffinity {terms}"
    for taint in node.taints:
        if not tolerates(demand.tolerations, taint):
            return f"untolerated taint {taint.key}={taint.value or ''}:{taint.effect}"
    return None


def admitting_nodes(nodes: Sequence[NodeRoom | NodeSnapshot], demand: PodDemand) -> list[int]:
    """Indexes of the nodes whose labels and taints admit the demand's pods."""
    return [i for i, node in enumerate(nodes) if admission_problem(node, demand) is None]


def _needs(demand: PodDemand, node: NodeRoom) -> dict[str, Amount]:
    return demand.needs[_POD_SLOT in node.free]


def _slack(free: Mapping[str, Amount], needs: tuple[tuple[str, Amount], ...]) -> Amount | None:
    """The smallest slack left after placing one pod; None when something does not fit."""
    slack: Amount | None = None
    for resource, amount in needs:
        left = free.get(resource, 0) - amount
        if left < 0:
            return None
        if slack is None or left < slack:
            slack = left
    return slack if slack is not None else 0


def shortage(
    nodes: Sequence[NodeRoom],
    demand: PodDemand,
    placed: int,
    admitting: Sequence[int] | None = None,
    gang: Sequence[PodDemand] = (),
) -> str:
    """Why the next pod of `demand` has no room; `nodes` is the room before the gang, `gang`
    all of its demands (to count the pods that hold the same host ports)."""
    return explain_shortage(nodes, demand, placed, admitting, gang)[0]


def explain_shortage(
    nodes: Sequence[NodeRoom],
    demand: PodDemand,
    placed: int,
    admitting: Sequence[int] | None = None,
    gang: Sequence[PodDemand] = (),
) -> tuple[str, str]:
    """`shortage`, and its kind in a few words ("insufficient cpu"), which a decision counts
    its rejected clusters by."""
    if admitting is None:
        admitting = admitting_nodes(nodes, demand)
    if not admitting:
        problems = sorted({admission_problem(n, demand) or "" for n in nodes})
        detail = "; ".join(problems) if nodes else "the cluster has no nodes"
        return f"no node admits {demand.replica_type} pods ({detail})", "no node admits the pods"
    short = []
    short_of: list[str] = []
    ports_taken: list[str] = []
    ports = []
    for resource, amount in _needs(demand, nodes[admitting[0]]).items():
        held = is_port_resource(resource)
        if held:
            ports.append(port_of(resource))
        best = max(nodes[i].free.get(resource, 0) for i in admitting)
        if best >= amount:
            continue
        if held:
            short.append(f"host port {port_of(resource)} is taken on every node that admits it")
            ports_taken.append(f"host port {port_of(resource)} taken")
        else:
            short_of.append(resource)
            short.append(
                f"{resource}: needs {format_quantity(amount)} per pod, "
                f"most on one node {format_quantity(max(best, 0))}"
            )
    if short:
        reason = f"{demand.replica_type} pod does not fit on any node ({'; '.join(short)})"
        kinds = [f"insufficient {', '.join(short_of)}"] if short_of else []
        return reason, "; ".join(kinds + ports_taken)
    spread = ""
    if ports:
        taken = [r for r in demand.requests if is_port_resource(r)]
        holders = sum(d.count for d in gang if any(r in d.requests for r in taken))
        room = sum(1 for i in admitting if all(nodes[i].free.get(r, 0) >= 1 for r in taken))
        counts = f"; {holders} pods of the job hold it, {room} nodes have it free" if gang else ""
        spread = f" (its pods hold host port {', '.join(sorted(ports))}: one to a node{counts})"
    reason = (
        f"not enough nodes for the whole gang at once: room for {placed} of "
        f"{demand.count} {demand.replica_type} pods next to the other replicas{spread}"
    )
    return reason, "not enough nodes for the whole gang"


_UNBOUNDED = 1 << 62
_MANY = 1 << 24
"""More pods than any gang has (replicas are capped at 10,000 per type)."""


def pod_slots(free: Mapping[str, Amount], needs: tuple[tuple[str, Amount], ...]) -> int:
    """How many pods taking `needs` fit into `free` at once (at most `_MANY` are counted:
    an exact quotient of 2^63 by 1e-10 is beyond Decimal's precision)."""
    slots = _UNBOUNDED
    for resource, amount in needs:
        have = free.get(resource, 0)
        if have < amount:
            return 0
        try:
            fit = int(have // amount)
        except (InvalidOperation, OverflowError):  # a quotient past Decimal's precision
            fit = _MANY
        if fit > _MANY:
            fit = _MANY
        if fit < slots:
            slots = fit
    return slots


def largest_pod(demands: Sequence[PodDemand]) -> PodDemand:
    """A pod as large as the largest of each resource among `demands`."""
    largest: dict[str, Amount] = {}
    for demand in demands:
        for resource, amount in demand.requests.items():
            largest[resource] = max(largest.get(resource, 0), amount)
    return PodDemand("*", sum(d.count for d in demands), largest)


def surely_fits(
    free_of: Callable[[int], Mapping[str, Amount]],
    pod_slot: Sequence[bool],
    demands: Sequence[PodDemand],
    candidates: Sequence[Sequence[int]],
    common: Sequence[int] = (),
    largest: PodDemand | None = None,
) -> tuple[bool | None, int, Sequence[int]]:
    """Decide `gang_fit` without packing where counting is enough.

    One replica type: best fit places a pod wherever one still fits, so the gang fits
    exactly when the nodes' pod slots add up to the count; (False, slots, ()) otherwise.
    Several: if the nodes admitting every type (`common`) hold enough slots for the
    `largest_pod` of the gang, packing cannot get stuck (True); otherwise (None, 0, ()):
    pack. Nodes are visited last first, since best fit fills the first nodes first.
    With True come the nodes counted: while their free amounts stay, the gang still fits.
    """
    if not demands:
        return True, 0, ()
    if len(demands) == 1:
        demand, nodes = demands[0], candidates[0]
    elif largest is not None:
        demand, nodes = largest, common
    else:
        return None, 0, ()
    needs = demand.positive_needs
    wanted = demand.count
    total = 0
    for position in range(len(nodes) - 1, -1, -1):
        index = nodes[position]
        total += pod_slots(free_of(index), needs[pod_slot[index]])
        if total >= wanted:
            return True, total, nodes[position:]
    return (False, total, ()) if len(demands) == 1 else (None, 0, ())


def gang_fit(
    nodes: Sequence[NodeRoom],
    demands: Sequence[PodDemand],
    *,
    candidates: Sequence[Sequence[int]] | None = None,
    ordered: bool = False,
) -> FitResult:
    """Place every pod of the job on the given nodes, or say why that is impossible.

    `candidates` may give, per demand, the indexes of the nodes admitting it (cached
    admission); `ordered` says the demands already are in `packing_order`.
    """
    if not ordered:
        demands = packing_order(demands)
    if candidates is None:
        candidates = [admitting_nodes(nodes, demand) for demand in demands]
    names = [n.name for n in nodes]
    pod_slot = [_POD_SLOT in n.free for n in nodes]
    usage, failure = best_fit(lambda i: nodes[i].free, names, pod_slot, demands, candidates)
    if usage is not None:
        return FitResult(True, usage=usage)
    assert failure is not None
    at, placed = failure
    reason = shortage(nodes, demands[at], placed, candidates[at], demands)
    if len(demands) == 1:
        return FitResult(False, reason=reason)  # best fit is exact for one replica type
    found, complete = search_fit(lambda i: nodes[i].free, names, pod_slot, demands, candidates)
    if found is not None:
        return FitResult(True, usage=found)
    return FitResult(False, reason=reason, certain=complete)


def best_fit(
    free_of: Callable[[int], Mapping[str, Amount]],
    names: Sequence[str],
    pod_slot: Sequence[bool],
    demands: Sequence[PodDemand],
    candidates: Sequence[Sequence[int]],
) -> tuple[Usage | None, tuple[int, int] | None]:
    """Pack the demands (in the given order) onto nodes: each pod on the admitting node it
    leaves the least slack on, the first such node on ties. Returns the usage, or which
    demand found no room and how many of its pods were placed.

    Only the chosen node's slack changes per pod, so the candidates sit in a heap; only the
    nodes that take pods are copied.
    """
    taken: dict[int, dict[str, Amount]] = {}
    usage: Usage = {}
    for at, demand in enumerate(demands):
        positive, full = demand.positive_needs, demand.needs
        heap: list[tuple[Amount, int]] = []
        for index in candidates[at]:
            room = taken.get(index)
            slack = _slack(free_of(index) if room is None else room, positive[pod_slot[index]])
            if slack is not None:
                heap.append((slack, index))
        heapq.heapify(heap)
        for placed in range(demand.count):
            if not heap:
                return None, (at, placed)
            _, index = heapq.heappop(heap)
            room = taken.get(index)
            if room is None:
                room = taken[index] = dict(free_of(index))
            node_usage = usage.setdefault(names[index], {})
            for resource, amount in full[pod_slot[index]].items():
                room[resource] = room.get(resource, 0) - amount
                node_usage[resource] = node_usage.get(resource, 0) + amount
            slack = _slack(room, positive[pod_slot[index]])
            if slack is not None:
                heapq.heappush(heap, (slack, index))
    return usage, None


SEARCH_BUDGET = 4_000
"""Pods tried on nodes before `search_fit` gives up (some milliseconds)."""


def search_fit(
    free_of: Callable[[int], Mapping[str, Amount]],
    names: Sequence[str],
    pod_slot: Sequence[bool],
    demands: Sequence[PodDemand],
    candidates: Sequence[Sequence[int]],
    budget: int = SEARCH_BUDGET,
) -> tuple[Usage | None, bool]:
    """Pack with backtracking where `best_fit` got stuck: greedy packing of several replica
    types can fill the node one type needed with another (kube-scheduler, placing pod by
    pod, would not have). Depth first over the pods, each tried on the nodes that can take
    it, best fit first; the pods of one type, being interchangeable, go to nodes in the
    order of their candidates, so no packing is tried twice.

    Returns the usage, or None and whether the search was complete: False when it gave up
    after `budget` tries, and then the gang may fit after all. Nodes that cannot hold the
    gang even counted in sum are answered at once (`cannot_fit`)."""
    if cannot_fit(free_of, pod_slot, demands, candidates):
        return None, True
    order = [at for at, demand in enumerate(demands) for _ in range(demand.count)]
    rooms: dict[int, dict[str, Amount]] = {}

    def room(index: int) -> dict[str, Amount]:
        found = rooms.get(index)
        if found is None:
            found = rooms[index] = dict(free_of(index))
        return found

    def fitting(depth: int, chosen: list[int]) -> list[int]:
        at = order[depth]
        first = chosen[-1] if depth and order[depth - 1] == at else 0
        demand, nodes = demands[at], candidates[at]
        slacks = []
        for position in range(first, len(nodes)):
            index = nodes[position]
            slack = _slack(room(index), demand.positive_needs[pod_slot[index]])
            if slack is not None:
                slacks.append((slack, position))
        slacks.sort()
        return [position for _, position in slacks]

    def move(depth: int, position: int, sign: int) -> None:
        at = order[depth]
        index = candidates[at][position]
        free = room(index)
        for resource, amount in demands[at].needs[pod_slot[index]].items():
            free[resource] = free.get(resource, 0) - sign * amount

    if not order:
        return {}, True
    chosen: list[int] = []
    frames: list[tuple[list[int], int]] = [(fitting(0, chosen), 0)]
    tries = 0
    while frames:
        options, following = frames[-1]
        depth = len(frames) - 1
        if len(chosen) > depth:  # back from a deeper frame: undo this depth's last choice
            move(depth, chosen.pop(), -1)
        if following >= len(options):
            frames.pop()
            continue
        tries += 1
        if tries > budget:
            return None, False
        frames[-1] = (options, following + 1)
        move(depth, options[following], +1)
        chosen.append(options[following])
        if len(chosen) == len(order):
            usage: Usage = {}
            for at_depth, position in enumerate(chosen):
                at = order[at_depth]
                index = candidates[at][position]
                node_usage = usage.setdefault(names[index], {})
                for resource, amount in demands[at].needs[pod_slot[index]].items():
                    node_usage[resource] = node_usage.get(resource, 0) + amount
            return usage, True
        frames.append((fitting(len(chosen), chosen), 0))
    return None, True


def cannot_fit(
    free_of: Callable[[int], Mapping[str, Amount]],
    pod_slot: Sequence[bool],
    demands: Sequence[PodDemand],
    candidates: Sequence[Sequence[int]],
) -> bool:
    """True when the nodes surely cannot hold the gang: a replica type has fewer pod slots
    on its nodes than pods, or the gang needs more of a resource than its nodes have."""
    needed: dict[str, Amount] = {}
    have: dict[str, Amount] = {}
    counted: set[int] = set()
    for demand, nodes in zip(demands, candidates, strict=True):
        slots = 0
        for index in nodes:
            slots += pod_slots(free_of(index), demand.positive_needs[pod_slot[index]])
            if index not in counted:
                counted.add(index)
                for resource, amount in free_of(index).items():
                    have[resource] = have.get(resource, 0) + amount
        if slots < demand.count:
            return True
        for resource, amount in demand.requests.items():
            needed[resource] = needed.get(resource, 0) + amount * demand.count
    return any(amount > have.get(resource, 0) for resource, amount in needed.items())


Entry = tuple[Amount, int, int]
"""A packing candidate: (slack after one more pod, node index, token)."""


class PackingHeap:
    """Best fit's candidates for one kind of pod on one cluster, kept current as nodes change.

    A heap of (slack after one more pod, node, token): an entry counts only while its token
    is the node's current one, so a changed node just gets a new entry.
    """

    __slots__ = ("_current", "_next", "_size", "entries")

    def __init__(self, entries: list[Entry]) -> None:
        """`entries`: a heap of (slack, node, 0), one per node a pod fits on now."""
        self.entries = entries
        self._size = len(entries)
        self._current: dict[int, int] = {}
        self._next = 1

    @classmethod
    def scan(
        cls,
        free_of: Callable[[int], Mapping[str, Amount]],
        pod_slot: Sequence[bool],
        demand: PodDemand,
        candidates: Sequence[int],
    ) -> PackingHeap:
        positive = demand.positive_needs
        entries: list[Entry] = []
        last: Mapping[str, Amount] | None = None
        last_slot = False
        slack: Amount | None = None
        for index in candidates:
            free, slot = free_of(index), pod_slot[index]
            # A node pool's nodes with nothing running or reserved share one mapping of free
            # amounts (placement's facts do): their slack is worked out once per run of them.
            if free is not last or slot != last_slot:
                slack = _slack(free, positive[slot])
                last, last_slot = free, slot
            if slack is not None:
                entries.append((slack, index, 0))
        heapq.heapify(entries)
        return cls(entries)

    def current(self) -> dict[int, int]:
        """node index -> the token its valid entry has (absent: 0)."""
        return self._current

    def refresh(
        self,
        free_of: Callable[[int], Mapping[str, Amount]],
        pod_slot: Sequence[bool],
        demand: PodDemand,
        nodes: Iterable[int],
    ) -> None:
        """Give the `nodes` (all admitting the demand) entries for their free amounts now."""
        positive = demand.positive_needs
        entries, current = self.entries, self._current
        for index in nodes:
            token = self._next
            self._next += 1
            current[index] = token
            slack = _slack(free_of(index), positive[pod_slot[index]])
            if slack is not None:
                heapq.heappush(entries, (slack, index, token))
        # Outdated entries stay until compaction, and every `best_fit_from` pops those above
        # the entries it takes (from its own copy): keep them few, and none on top.
        if len(entries) > self._size + max(16, self._size // 4):
            self.entries = entries = [e for e in entries if current.get(e[1], 0) == e[2]]
            heapq.heapify(entries)
            self._size = len(entries)
        while entries and current.get(entries[0][1], 0) != entries[0][2]:
            heapq.heappop(entries)

    def token(self) -> int:
        """A token no entry has yet."""
        self._next += 1
        return self._next - 1


def best_fit_from(
    free_of: Callable[[int], Mapping[str, Amount]],
    names: Sequence[str],
    pod_slot: Sequence[bool],
    demands: Sequence[PodDemand],
    heaps: Sequence[PackingHeap],
    admitted: Sequence[Collection[int]],
) -> Usage | None:
    """`best_fit` from up-to-date `PackingHeap`s (left unchanged): only the nodes the gang
    takes cost Python work, however many nodes the cluster has. None when it does not fit."""
    taken: dict[int, dict[str, Amount]] = {}
    usage: Usage = {}
    for at, demand in enumerate(demands):
        positive, full = demand.positive_needs, demand.needs
        start = heaps[at]
        heap = list(start.entries)
        current = dict(start.current())
        allowed = admitted[at]
        for index, used in taken.items():
            if index in allowed:
                token = current[index] = start.token()
                slack = _slack(used, positive[pod_slot[index]])
                if slack is not None:
                    heapq.heappush(heap, (slack, index, token))
        for _ in range(demand.count):
            while heap:
                _, index, mark = heapq.heappop(heap)
                if current.get(index, 0) == mark:
                    break
            else:
                return None
            room = taken.get(index)
            if room is None:
                room = taken[index] = dict(free_of(index))
            node_usage = usage.setdefault(names[index], {})
            for resource, amount in full[pod_slot[index]].items():
                room[resource] = room.get(resource, 0) - amount
                node_usage[resource] = node_usage.get(resource, 0) + amount
            token = current[index] = start.token()
            slack = _slack(room, positive[pod_slot[index]])
            if slack is not None:
                heapq.heappush(heap, (slack, index, token))
    return usage
