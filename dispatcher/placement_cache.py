"""What placement keeps between decisions, so that a cluster nothing happened to costs nothing.

`ClusterFacts` holds one heartbeat snapshot in the form packing needs (node rooms, totals,
admission per kind of pod), plus its free capacity after reservations for the current
reservation version. A `Board` holds, for one job shape, the verdict on every cluster of the
last decision and their ranking; the next decision of that shape redoes only the clusters
whose snapshot was replaced, whose reservations changed (from the reservations' change log)
or whose heartbeat age matters, so its cost follows what changed rather than the fleet size.
Within a cluster, a gang that fit is only counted again when the nodes that held it changed
(the shape's witness), and packing reads one heap per kind of pod, shared by the shapes
(dispatcher/pod_kind_packing.py). Every verdict is the same as a fresh evaluation would give
(tests/dispatcher/test_placement_equivalence.py compares them on random fleets).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from dispatcher.amounts import Amount, compact, compact_all
from dispatcher.demand import CLUSTER_SELECTOR, JobProfile, PodDemand
from dispatcher.gang_fit import (
    NodeRoom,
    Usage,
    admitting_nodes,
    best_fit,
    best_fit_from,
    explain_shortage,
    gang_fit,
    largest_pod,
    search_fit,
    surely_fits,
)
from dispatcher.pod_kind_packing import PodKind, PodKindPacking, pod_kind
from dispatcher.pod_policy import policy_refusal
from dispatcher.port_rooms import PortRooms
from dispatcher.reservation_versions import VersionedReservations
from dispatcher.reservations import Reservations
from dispatcher.scoring import ScoreInput, WeightedScorer
from schemas.cluster import ClusterSnapshot
from schemas.events import ClusterScore

_score = ClusterScore.__pydantic_validator__.validate_python
"""Builds a ClusterScore from a dict: the model's own validation without the Python
`__init__` around it, a third cheaper (setting the fields through `object.__setattr__`, as
`model_construct` does, measured no cheaper). Built only for the verdicts a decision lists."""
_POD_SLOT = "pods"
_RANK_BITS = 24
"""Bits of a board key that hold the cluster's place in name order (16 million clusters)."""
_MAX_SHAPES_PER_CLUSTER = 512
_MAX_BOARDS = 256
_MAX_SHAPE_IDS = 4096


def _minus(amount: Amount, requested: Amount | None) -> Amount:
    """`compact(amount - requested)` for a compact `amount`: ints subtract exactly, as the
    Decimals did below 28 digits."""
    if requested is None:
        return amount
    return compact(amount - compact(requested))


def to_thousandths(value: float) -> float:
    """`round(value, 3)`, the same float, without round()'s decimal conversion (a tenth of
    judging a cluster): scores are means of shares of capacities, often powers of two, so
    nearly half of them lie exactly halfway between two thousandths."""
    scaled = value * 1000.0
    if 0.0 < scaled < 1e15:  # (zero: round keeps the sign of -0.0)
        whole = int(scaled + 0.5)
        if abs(scaled - whole) < 0.4999:  # far from a tie: the nearest thousandth is `whole`
            return whole / 1000.0  # division rounds correctly: the float round() returns
        # Near a tie: settle it on the float's exact value, half to even, as round() does.
        numerator, denominator = value.as_integer_ratio()
        whole, left = divmod(numerator * 1000, denominator)
        if 2 * left > denominator or (2 * left == denominator and whole % 2 == 1):
            whole += 1
        return whole / 1000.0
    return round(value, 3)


# Kinds of rejection, which a decision counts its rejected clusters by (a capacity
# shortage's kind names the resources short: `gang_fit.explain_shortage`).
MALFORMED = "malformed job"
LABELS = "cluster labels do not match"
NAMESPACE = "namespace not allowed"
POD_SECURITY = "refused by pod security policy"
NEVER_FITS = "too small for the job"
UNHEALTHY = "unhealthy"
STALE = "stale heartbeat"


class Verdict:
    """One cluster's verdict for one job shape."""

    __slots__ = (
        "_score",
        "feasible",
        "kind",
        "max_cost",
        "name",
        "never",
        "parts",
        "reason",
        "sort_key",
        "timed",
        "usage",
        "value",
        "version",
    )

    def __init__(
        self,
        name: str,
        sort_key: tuple[bool, float, str],
        *,
        feasible: bool = False,
        value: float | None = None,
        reason: str | None = None,
        kind: str = "",
        never: bool = False,
        timed: bool = False,
        usage: Usage | None = None,
        parts: tuple[tuple[str, float], ...] = (),
    ) -> None:
        self.name = name
        self.value = value
        """The score (feasible verdicts)."""
        self.reason = reason
        """Why the cluster was rejected, in full."""
        self.kind = kind
        """The rejection's kind of reason, which decisions count."""
        self._score: ClusterScore | None = None
        self.sort_key = sort_key
        self.feasible = feasible
        self.never = never
        """Rejected for a reason no capacity change would lift (policy, labels, size)."""
        self.timed = timed
        """Depends on the clock (a stale heartbeat's age)."""
        self.usage = usage
        """Where the gang goes; worked out only once the cluster is chosen."""
        self.parts = parts
        self.version: object = None
        self.max_cost = 0.0

    @property
    def score(self) -> ClusterScore:
        """The verdict as a decision lists it; built on first use, as most verdicts are
        never listed."""
        built = self._score
        if built is None:
            if self.feasible:
                built = _score({"name": self.name, "feasible": True, "score": self.value})
            else:
                built = _score({"name": self.name, "feasible": False, "reason": self.reason})
            self._score = built
        return built


def rejected(
    name: str, reason: str, kind: str, *, never: bool = False, timed: bool = False
) -> Verdict:
    return Verdict(name, (True, 0.0, name), reason=reason, kind=kind, never=never, timed=timed)


class _ShapeState:
    """One job shape on one snapshot: admitting nodes, the "never" verdict, the last one."""

    __slots__ = (
        "admitted",
        "candidates",
        "common",
        "judged",
        "kinds",
        "largest",
        "never",
        "now",
        "scoring",
        "static_scores",
        "witness",
    )

    def __init__(
        self,
        candidates: list[list[int]],
        admitted: list[set[int]],
        common: list[int],
        largest: PodDemand | None,
    ) -> None:
        self.candidates = candidates
        """Per demand (in packing order), the indexes of the nodes admitting it."""
        self.admitted = admitted
        self.kinds: list[PodKind] | None = None
        """Per demand, its kind of pod (the cluster keeps one packing heap per kind)."""
        self.common = common
        """Nodes admitting every demand (when there are several)."""
        self.largest = largest
        self.never: Verdict | None = None
        self.judged = False
        """Whether `never` is worked out for this snapshot."""
        self.now: Verdict | None = None
        self.scoring: ScoreInput | None = None
        """What the scorer reads, kept for this snapshot: a new verdict sets the free amounts."""
        self.static_scores: tuple[float | None, ...] = ()
        """The scorer's `static_scores` for this snapshot and shape."""
        self.witness: tuple[tuple[str, int], ...] | None = None
        """Nodes whose free amounts alone held the gang when last judged, with their
        reservation versions then: while those stand, the gang still fits (only capacity
        elsewhere moved), and judging it again need not count slots."""

    def carried(self) -> _ShapeState:
        """This state for the next snapshot of the same nodes: the verdicts are dropped."""
        moved = _ShapeState(self.candidates, self.admitted, self.common, self.largest)
        moved.kinds = self.kinds
        return moved

    @classmethod
    def of(
        cls, candidates: list[list[int]], admitted: list[set[int]], profile: JobProfile
    ) -> _ShapeState:
        common: list[int] = []
        largest: PodDemand | None = None
        if len(candidates) > 1:
            common = sorted(admitted[0].intersection(*admitted[1:]))
            largest = largest_pod(profile.ordered)
        return cls(candidates, admitted, common, largest)


_UNSET = object()


class Context:
    """What one decision judges against, besides the job and the cluster (a plain class:
    built for every decision, natively in the compiled build, unlike a dataclass)."""

    __slots__ = ("max_age", "max_cost", "now", "now_at", "reservations", "scorer", "version_of")

    def __init__(
        self,
        reservations: Reservations | None,
        scorer: WeightedScorer,
        now: datetime,
        max_age: float,
        max_cost: float,
        version_of: Callable[[str], int] | None,
    ) -> None:
        self.reservations = reservations
        self.scorer = scorer
        self.now = now
        self.max_age = max_age
        self.max_cost = max_cost
        self.version_of = version_of
        """The reservations' per-cluster version; None when they cannot tell (no caching)."""
        self.now_at = now.timestamp()
        """`now` in seconds since the epoch."""


class ClusterFacts:
    """What one heartbeat snapshot says, precomputed once for every decision that uses it,
    and its free capacity after reservations, recomputed when those change."""

    def __init__(self, snapshot: ClusterSnapshot, previous: ClusterFacts | None = None) -> None:
        self.snapshot = snapshot
        self.name = snapshot.name
        nodes = snapshot.nodes
        self.node_names = [n.name for n in nodes]
        self.node_index = {name: i for i, name in enumerate(self.node_names)}
        self.base_free: list[dict[str, Amount]] = []
        self.allocatable: list[dict[str, Amount]] = []
        """Per node, its allocatable amounts made compact (shared by a node pool's nodes)."""
        capacity: dict[str, Amount] = {}
        free: dict[str, Amount] = {}
        pod_slot: list[bool] = []
        last: tuple[Mapping[str, Decimal], dict[str, Amount], bool] | None = None
        idle: dict[str, Amount] | None = None
        """The amounts of the idle node before, when whole numbers: `more` idle nodes of its
        pool in a row after it are added to the sums at once, multiplied."""
        more = 0
        for node in nodes:
            requested = node.requested
            # Each amount made compact once, and once for a run of nodes of one allocatable
            # (a node pool): the Decimal conversions were most of a snapshot's cost (every
            # cluster's first decision, and each heartbeat).
            allocatable = node.allocatable
            if last is not None and (
                last[0] is allocatable
                or (last[0] == allocatable and list(last[0]) == list(allocatable))
            ):
                whole, whole_ints = last[1], last[2]
            else:
                whole = compact_all(allocatable)
                whole_ints = all(type(a) is int for a in whole.values())
                last = (allocatable, whole, whole_ints)
            pod_slot.append(_POD_SLOT in whole)
            self.allocatable.append(whole)
            if requested:
                left = {r: _minus(a, requested.get(r)) for r, a in whole.items()}
            else:  # shared by the pool's idle nodes (read-only, as every free amount here)
                left = whole
            self.base_free.append(left)
            if left is idle:
                more += 1
                continue
            if more and idle is not None:
                _add_times(capacity, free, idle, more)
                more = 0
            idle = left if not requested and whole_ints else None
            for resource, amount in whole.items():
                capacity[resource] = capacity.get(resource, 0) + amount
                have = left[resource]
                if have > 0:
                    free[resource] = free.get(resource, 0) + have
                elif resource not in free:
                    free[resource] = 0
        if more and idle is not None:
            _add_times(capacity, free, idle, more)
        self.capacity, self.free = capacity, free
        self.capacity_float = {r: float(a) for r, a in capacity.items()}
        self.pod_slot = pod_slot
        observed = snapshot.observedAt
        if observed is not None and observed.tzinfo is None:
            observed = observed.replace(tzinfo=UTC)
        self.observed = observed
        self.observed_at = observed.timestamp() if observed is not None else None
        """The observation time in seconds since the epoch, for cheap age checks."""
        self.unhealthy = (
            None
            if snapshot.healthy
            else rejected(
                self.name, snapshot.unhealthyReason or "cluster reports unhealthy", UNHEALTHY
            )
        )
        self.shapes: dict[int, _ShapeState] = {}
        self._stale: Verdict | None = None
        """The last "heartbeat is stale" verdict, shared by the job shapes."""
        self.packings: dict[PodKind, PodKindPacking] = {}
        """Per kind of pod, best fit's candidates on the free capacity now, kept up to date."""
        self._admitting: dict[tuple[object, ...], tuple[list[int], set[int]]] = {}
        """Per admission key (`PodDemand.admission_key`), the nodes admitting such pods, as a
        list and as a set: shared by every job shape with such pods."""
        self._empty_rooms: list[NodeRoom] | None = None
        self._version: object = _UNSET
        self._reserved: Mapping[str, Mapping[str, Amount]] = {}
        self._node_versions: Mapping[str, int] = {}
        self._patched: dict[int, tuple[int, dict[str, Amount]]] = {}
        self._free_now: dict[str, Amount] = {}
        self._free_float: dict[str, float] = {}
        self._rooms_now: list[NodeRoom] | None = None
        if previous is not None and previous.name == self.name:
            self._inherit(previous)

    def _inherit(self, previous: ClusterFacts) -> None:
        """Keep what the previous snapshot of the same nodes had worked out per job shape:
        which nodes admit it, and the packing heaps (refreshed where free amounts moved)."""
        nodes, before = self.snapshot.nodes, previous.snapshot.nodes
        if self.node_names != previous.node_names or any(
            a.labels != b.labels or a.taints != b.taints for a, b in zip(nodes, before, strict=True)
        ):
            return
        self._admitting = previous._admitting
        moved = [
            i
            for i, (now, then) in enumerate(zip(self.base_free, previous.base_free, strict=True))
            if now != then
        ]
        self.shapes = {sid: shape.carried() for sid, shape in previous.shapes.items()}
        self.packings = {kind: p.carried(moved) for kind, p in previous.packings.items()}

    @property
    def empty_rooms(self) -> list[NodeRoom]:
        if self._empty_rooms is None:
            self._empty_rooms = [
                NodeRoom(n.name, dict(n.allocatable), n.labels, n.taints)
                for n in self.snapshot.nodes
            ]
        return self._empty_rooms

    def stale_after(self, max_age: float) -> datetime | None:
        """When this heartbeat turns stale; None: never (no observation time)."""
        if self.observed is None:
            return None
        return self.observed + timedelta(seconds=max_age)

    def _admitting_nodes(self, demand: PodDemand) -> tuple[list[int], set[int]]:
        key = demand.admission_key
        found = self._admitting.get(key)
        if found is None:
            nodes = admitting_nodes(self.snapshot.nodes, demand)
            found = self._admitting[key] = (nodes, set(nodes))
        return found

    def _shape(self, profile: JobProfile, shape_id: int) -> _ShapeState:
        shape = self.shapes.get(shape_id)
        if shape is None:
            if len(self.shapes) >= _MAX_SHAPES_PER_CLUSTER:
                self.shapes.clear()
                self.packings.clear()
            admitting = [self._admitting_nodes(d) for d in profile.ordered]
            shape = self.shapes[shape_id] = _ShapeState.of(
                [nodes for nodes, _ in admitting], [known for _, known in admitting], profile
            )
        if not shape.judged:
            shape.never, shape.judged = self._never(profile, shape), True
        return shape

    def _never(self, profile: JobProfile, shape: _ShapeState) -> Verdict | None:
        snapshot = self.snapshot
        if profile.problem is not None:
            return rejected(self.name, profile.problem, MALFORMED, never=True)
        unmet = [str(r) for r in profile.cluster_selector if not r.matches(snapshot.labels)]
        if unmet:
            return rejected(
                self.name,
                f"cluster labels do not satisfy the job's {CLUSTER_SELECTOR} ({', '.join(unmet)})",
                LABELS,
                never=True,
            )
        if snapshot.namespaces is not None and profile.namespace not in snapshot.namespaces:
            return rejected(
                self.name,
                f"namespace {profile.namespace!r} is not allowed on this cluster",
                NAMESPACE,
                never=True,
            )
        refusal = policy_refusal(profile.pod_security, snapshot.policy)
        if refusal is not None:
            return rejected(self.name, refusal, POD_SECURITY, never=True)
        nodes = self.snapshot.nodes
        if not nodes and not snapshot.healthy:
            # A worker that stopped (or cannot read its cluster) reports no nodes: that says
            # nothing of the nodes a restarted worker will find, so "not now", not "never".
            return None
        # The compact amounts: counting slots in ints, not in the snapshot's Decimals, was
        # most of judging a cluster for a job shape the first time (once per heartbeat).
        allocatable = self.allocatable
        fits, _, _ = surely_fits(
            lambda i: allocatable[i],
            self.pod_slot,
            profile.ordered,
            shape.candidates,
            shape.common,
            shape.largest,
        )
        if fits:
            return None
        empty_fit = gang_fit(
            self.empty_rooms, profile.ordered, candidates=shape.candidates, ordered=True
        )
        if not empty_fit.fits and empty_fit.certain:
            reason = f"can never fit: {empty_fit.reason}"
            return rejected(self.name, reason, NEVER_FITS, never=True)
        return None

    def judge(self, profile: JobProfile, shape_id: int, context: Context) -> Verdict:
        """This cluster's verdict for the job, all filters and the score included (the
        job's own exclusions aside)."""
        shape = self.shapes.get(shape_id)
        if shape is None or not shape.judged:
            shape = self._shape(profile, shape_id)
        if shape.never is not None:
            return shape.never
        if self.unhealthy is not None:
            return self.unhealthy
        if self.observed_at is not None:
            age = context.now_at - self.observed_at
            if age > context.max_age:
                reason = f"heartbeat is stale ({age:.0f}s old, limit {context.max_age:.0f}s)"
                stale = self._stale
                # The same verdict while its words stand (they change once a second): a
                # board judges its stale clusters again at every decision, and an unchanged
                # verdict costs it nothing, where a new one was re-ranked for each of them.
                if stale is None or stale.reason != reason:
                    stale = self._stale = rejected(self.name, reason, STALE, timed=True)
                return stale
        if context.reservations is None:
            version: object = 0
        else:
            version_of = context.version_of
            version = version_of(self.name) if version_of is not None else None
        verdict = shape.now
        if (
            verdict is None
            or version is None
            or verdict.version != version
            or verdict.max_cost != context.max_cost
        ):
            verdict = shape.now = self._judge_capacity(profile, shape, context, version)
        return verdict

    def _at(self, reservations: Reservations | None, version: object) -> None:
        """Bring the after-reservations state to `version` (None: always recompute)."""
        if version is not None and version == self._version:
            return
        self._version = version
        self._rooms_now = None
        if reservations is None:
            self._reserved, self._free_now = {}, self.free
        else:
            self._reserved = reservations.on_node(self.name)
            total = reservations.total
            self._free_now = {r: v - total(self.name, r) for r, v in self.free.items()}
        self._free_float = {r: float(v) for r, v in self._free_now.items()}
        if reservations is None:
            return
        if isinstance(reservations, VersionedReservations):
            self._node_versions = reservations.node_versions.get(self.name, {})
        else:
            self._patched = {}

    def free_of(self, index: int) -> dict[str, Amount]:
        """Node `index`'s free amounts after reservations."""
        name = self.node_names[index]
        held = self._reserved.get(name)
        if not held:
            return self.base_free[index]
        version = self._node_versions.get(name, 0)
        known = self._patched.get(index)
        if known is not None and known[0] == version:
            return known[1]
        patched = {r: v - held.get(r, 0) for r, v in self.base_free[index].items()}
        self._patched[index] = (version, patched)
        return patched

    def _witness(self, nodes: Sequence[int]) -> tuple[tuple[str, int], ...]:
        versions, names = self._node_versions, self.node_names
        return tuple([(names[i], versions.get(names[i], 0)) for i in nodes])

    def _witness_stands(self, witness: tuple[tuple[str, int], ...]) -> bool:
        versions = self._node_versions
        for name, version in witness:
            if versions.get(name, 0) != version:
                return False
        return True

    def _rooms(self) -> list[NodeRoom]:
        if self._rooms_now is None:
            self._rooms_now = [
                NodeRoom(room.name, self.free_of(i), room.labels, room.taints)
                for i, room in enumerate(self.empty_rooms)
            ]
        return self._rooms_now

    def _judge_capacity(
        self, profile: JobProfile, shape: _ShapeState, context: Context, version: object
    ) -> Verdict:
        if version is None or version != self._version:
            self._at(context.reservations, version)
        usage: Usage | None = None
        ordered = profile.ordered
        fits: bool | None
        witness = shape.witness
        if witness is not None and version is not None and self._witness_stands(witness):
            fits, placed = True, 0
        else:
            fits, placed, counted = surely_fits(
                self.free_of, self.pod_slot, ordered, shape.candidates, shape.common, shape.largest
            )
            shape.witness = self._witness(counted) if fits and version is not None else None
        reason: str | None = None
        kind = "insufficient capacity"
        if fits is None:
            usage, failure = best_fit(
                self.free_of, self.node_names, self.pod_slot, ordered, shape.candidates
            )
            if usage is None and len(ordered) > 1:  # greedy packing may miss a packing
                usage, _ = search_fit(
                    self.free_of, self.node_names, self.pod_slot, ordered, shape.candidates
                )
            fits = usage is not None
            if not fits and failure is not None:
                at, placed = failure
                reason, kind = explain_shortage(
                    self._rooms(), ordered[at], placed, shape.candidates[at], ordered
                )
        elif not fits:
            reason, kind = explain_shortage(
                self._rooms(), ordered[0], placed, shape.candidates[0], ordered
            )
        if not fits:
            verdict = rejected(self.name, f"not enough free capacity now: {reason}", kind)
        else:
            scorer = context.scorer
            item = shape.scoring
            if item is None:
                item = shape.scoring = ScoreInput(
                    self.snapshot,
                    self._free_now,
                    profile.total,
                    profile.demands,
                    profile.preferred_clusters,
                    context.max_cost,
                    self.capacity,
                    self._free_float,
                    self.capacity_float,
                    profile.scored,
                )
                shape.static_scores = scorer.static_scores(item)
            else:
                item.free, item.free_float = self._free_now, self._free_float
                item.max_cost = context.max_cost
            parts = scorer.parts(item, shape.static_scores)
            score = to_thousandths(scorer.combine(parts))
            verdict = Verdict(
                self.name,
                (False, -score, self.name),
                feasible=True,
                value=score,
                usage=usage,
                parts=parts,
            )
        verdict.version, verdict.max_cost = version, context.max_cost
        return verdict

    def pack(
        self, profile: JobProfile, shape_id: int, context: Context, verdict: Verdict
    ) -> Usage | None:
        """Where exactly the gang goes on this cluster now (best fit per node)."""
        if verdict.usage is None:
            reservations = context.reservations
            self._at(reservations, verdict.version)
            shape = self._shape(profile, shape_id)
            ordered = profile.ordered
            log = (
                reservations.node_log(self.name)
                if isinstance(reservations, VersionedReservations)
                else None
            )
            kinds = shape.kinds
            if kinds is None:
                kinds = shape.kinds = [pod_kind(d) for d in ordered]
            packings, heaps = self.packings, []
            for demand, kind, candidates, allowed in zip(
                ordered, kinds, shape.candidates, shape.admitted, strict=True
            ):
                packing = packings.get(kind)
                if packing is None:
                    packing = packings[kind] = PodKindPacking()
                heaps.append(
                    packing.current(
                        demand,
                        candidates,
                        allowed,
                        self.node_index,
                        log,
                        reservations is not None,
                        self.free_of,
                        self.pod_slot,
                    )
                )
            verdict.usage = best_fit_from(
                self.free_of, self.node_names, self.pod_slot, ordered, heaps, shape.admitted
            )
        return verdict.usage


def _add_times(
    capacity: dict[str, Amount], free: dict[str, Amount], idle: dict[str, Amount], times: int
) -> None:
    """Count `times` more idle nodes of whole `idle` amounts (whose resources the sums hold
    already) into the cluster's sums: exactly what adding them one by one gives."""
    for resource, amount in idle.items():
        capacity[resource] += amount * times
        if amount > 0:
            free[resource] += amount * times


def _same_items(current: list[ClusterSnapshot], known: list[ClusterSnapshot]) -> bool:
    """Whether the two lists hold the same snapshots, most often in a few nanoseconds a
    cluster: list equality skips identical items without touching them, where a loop comparing
    identities touched every snapshot's reference count (a cache miss each at 1,000 clusters).
    A snapshot replaced by an equal one counts as the same (its verdicts are), and the first
    that differs is usually told apart by its sequence or observation time."""
    return current == known


def feasible_key(verdict: Verdict, name_rank: int) -> int:
    """A feasible verdict's place on its board as one small int: its score descending (scores
    are judged to three decimals), then its cluster's place in name order. Boards keep their
    rankings sorted by bisection, where comparing (bool, float, str) sort keys cost 3,000
    instructions a lookup."""
    thousandths = verdict.sort_key[1] * 1000.0  # a whole number give or take float error
    # int() truncates: add half away from zero to round (round() is a Python call compiled).
    whole = int(thousandths + 0.5) if thousandths >= 0 else int(thousandths - 0.5)
    return (whole << _RANK_BITS) + name_rank


class Board:
    """One job shape's verdicts on every cluster of its last decision, ranked."""

    def __init__(self, shape_id: int) -> None:
        self.shape_id = shape_id
        self.snapshots: list[ClusterSnapshot] = []
        """The snapshots judged, by position (compared by identity)."""
        self.facts: list[ClusterFacts] = []
        self.verdicts: list[Verdict] = []
        self.position: dict[str, int] = {}
        self.name_ranks: list[int] = []
        """Per position, the cluster name's place in name order."""
        self.in_name_order = True
        """Whether positions are in name order (as the registry lists clusters)."""
        self.key_at: list[int] = []
        """Per feasible position, its `feasible_key`."""
        self.feasible_keys: list[int] = []
        """The feasible verdicts' keys, ascending: best first."""
        self.feasible_positions: list[int] = []
        self.rejected: dict[str, int] = {}
        """The rejections counted by kind; a decision lists the rejected clusters themselves
        only when nothing was chosen, found then by a scan."""
        self.log_end = 0
        self.max_age = -1.0
        self.max_cost = -1.0
        self.check_ages_at: datetime | None = None
        """From then on some fresh cluster may have gone stale: judge every age again."""
        self.timed: set[int] = set()
        self.possible = 0
        """Clusters whose verdict is not `never`."""

    def build(
        self,
        snapshots: list[ClusterSnapshot],
        facts: list[ClusterFacts],
        profile: JobProfile,
        context: Context,
        log_end: int,
    ) -> None:
        self.snapshots, self.facts = snapshots, facts
        self.position = {f.name: i for i, f in enumerate(facts)}
        by_name = sorted(range(len(facts)), key=lambda i: facts[i].name)
        self.name_ranks = [0] * len(facts)
        for rank, index in enumerate(by_name):
            self.name_ranks[index] = rank
        self.in_name_order = all(rank == index for index, rank in enumerate(self.name_ranks))
        self.verdicts = [f.judge(profile, self.shape_id, context) for f in facts]
        self.key_at = [0] * len(facts)
        self.feasible_keys, self.feasible_positions = [], []
        self.rejected = {}
        for index, verdict in enumerate(self.verdicts):
            self._put(index, verdict)
        self.log_end = log_end
        self.max_age, self.max_cost = context.max_age, context.max_cost
        self.timed = {i for i, v in enumerate(self.verdicts) if v.timed}
        self.possible = sum(1 for v in self.verdicts if not v.never)
        self.check_ages_at = self.earliest_stale(context)

    def earliest_stale(self, context: Context) -> datetime | None:
        """The first time a cluster that is fresh now turns stale."""
        times = [
            t
            for f, v in zip(self.facts, self.verdicts, strict=True)
            if not v.never
            and f.unhealthy is None
            and (t := f.stale_after(context.max_age)) is not None
            and t >= context.now
        ]
        return min(times) if times else None

    def update(
        self,
        positions: set[int],
        refreshed: set[int],
        profile: JobProfile,
        context: Context,
        log_end: int,
    ) -> None:
        """Judge `positions` again; `refreshed` have a new snapshot (a new heartbeat age)."""
        for index in positions:
            old = self.verdicts[index]
            new = self.facts[index].judge(profile, self.shape_id, context)
            if new is old:
                continue
            self.verdicts[index] = new
            self._take(index, old)
            self._put(index, new)
            self.possible += int(old.never) - int(new.never)
            if new.timed:
                self.timed.add(index)
            else:
                self.timed.discard(index)
            if index not in refreshed:
                continue
            stale_at = self.facts[index].stale_after(context.max_age)
            if (
                not new.never
                and stale_at is not None
                and stale_at >= context.now
                and (self.check_ages_at is None or stale_at < self.check_ages_at)
            ):
                self.check_ages_at = stale_at
        self.log_end = log_end

    def _put(self, index: int, verdict: Verdict) -> None:
        if verdict.feasible:
            key = self.key_at[index] = feasible_key(verdict, self.name_ranks[index])
            at = bisect_left(self.feasible_keys, key)
            self.feasible_keys.insert(at, key)
            self.feasible_positions.insert(at, index)
        else:
            rejected = self.rejected
            rejected[verdict.kind] = rejected.get(verdict.kind, 0) + 1

    def _take(self, index: int, verdict: Verdict) -> None:
        if verdict.feasible:
            at = bisect_left(self.feasible_keys, self.key_at[index])
            self.feasible_keys.pop(at)
            self.feasible_positions.pop(at)
        else:
            rejected = self.rejected
            left = rejected[verdict.kind] - 1
            if left:
                rejected[verdict.kind] = left
            else:
                del rejected[verdict.kind]

    def top(self, count: int) -> list[Verdict]:
        """The best `count` feasible verdicts, in the order a full list has them (score,
        then name)."""
        verdicts = self.verdicts
        return [verdicts[i] for i in self.feasible_positions[:count]]

    def best(self) -> Iterator[int]:
        """Positions of the feasible clusters, best score first, the earlier listed first on
        equal scores (read lazily: usually only the first is wanted)."""
        keys, positions = self.feasible_keys, self.feasible_positions
        in_name_order = self.in_name_order
        start = 0
        while start < len(keys):
            # The first key of the next score: ties are found by bisection, not one by one
            # (a fleet of alike clusters ties by the hundred).
            end = bisect_left(keys, ((keys[start] >> _RANK_BITS) + 1) << _RANK_BITS, start)
            if in_name_order:  # ties are ranked by name, which is position order then
                for at in range(start, end):
                    yield positions[at]
            else:
                yield from sorted(positions[start:end])
            start = end


class PlacementCache:
    """Per cluster, the facts of its newest snapshot; per job shape, a board.

    Tied to one scorer and one reservations book (a new pair clears it); entries are checked
    against the snapshot objects and reservation versions of each call, so a stale entry is
    never used, only replaced.
    """

    def __init__(self) -> None:
        self._facts: dict[str, ClusterFacts] = {}
        self._boards: OrderedDict[int, Board] = OrderedDict()
        self._shape_ids: dict[tuple[object, ...], int] = {}
        self._next_shape = 0
        self._bound: tuple[WeightedScorer, Reservations | None] | None = None
        self.port_rooms = PortRooms()
        """The snapshots as placement sees them, with room for host ports."""

    def bind(self, scorer: WeightedScorer, reservations: Reservations | None) -> None:
        bound = self._bound
        if bound is None or bound[0] is not scorer or bound[1] is not reservations:
            self._facts.clear()
            self._boards.clear()
            self._bound = (scorer, reservations)

    def shape_id(self, profile: JobProfile) -> int:
        """A number for the job's shape, so per-cluster lookups need not hash the shape."""
        found = self._shape_ids.get(profile.key)
        if found is None:
            if len(self._shape_ids) >= _MAX_SHAPE_IDS:
                self._shape_ids.clear()  # ids are never reused, so old entries just age out
            found = self._shape_ids[profile.key] = self._next_shape
            self._next_shape += 1
        return found

    def facts(self, snapshot: ClusterSnapshot) -> ClusterFacts:
        facts = self._facts.get(snapshot.name)
        if facts is None or facts.snapshot is not snapshot:
            facts = self._facts[snapshot.name] = ClusterFacts(snapshot, facts)
        return facts

    def board(
        self,
        profile: JobProfile,
        shape_id: int,
        clusters: Sequence[ClusterSnapshot],
        context: Context,
    ) -> Board | None:
        """The shape's board brought up to date for `clusters`; None when boards cannot be
        kept (reservations without a change log, or clusters sharing a name)."""
        reservations = context.reservations
        log_end = 0
        if reservations is not None:
            if not isinstance(reservations, VersionedReservations):
                return None
            log_end = reservations.changes.end
        board = self._boards.get(shape_id)
        if board is not None:
            self._boards.move_to_end(shape_id)
            changed: list[str] | None = []
            if isinstance(reservations, VersionedReservations):
                changed = reservations.changes.since(board.log_end)
            if (
                changed is not None
                and len(clusters) == len(board.snapshots)
                and board.max_age == context.max_age
                and board.max_cost == context.max_cost
            ):
                found = self._changes(board, clusters, changed)
                if found is not None:
                    positions, refreshed = found
                    if board.check_ages_at is not None and context.now > board.check_ages_at:
                        board.check_ages_at = None
                        everywhere = set(range(len(clusters)))
                        board.update(everywhere, set(), profile, context, log_end)
                        board.check_ages_at = board.earliest_stale(context)
                    else:
                        positions |= board.timed
                        board.update(positions, refreshed, profile, context, log_end)
                    return board
        facts = [self.facts(c) for c in clusters]
        if len({f.name for f in facts}) != len(facts):
            return None
        if board is None:
            board = self._boards[shape_id] = Board(shape_id)
            if len(self._boards) > _MAX_BOARDS:
                self._boards.popitem(last=False)
        board.build(list(clusters), facts, profile, context, log_end)
        return board

    def _changes(
        self,
        board: Board,
        snapshots: Sequence[ClusterSnapshot],
        changed: list[str],
    ) -> tuple[set[int], set[int]] | None:
        """Positions to judge again, and those of them with a new snapshot; None when the
        list of clusters itself changed."""
        refreshed: set[int] = set()
        known = board.snapshots
        # A list, typed as such: indexing a Sequence cost the compiled build a generic
        # lookup and a boxed index per cluster per decision (5% of placement at 100 clusters).
        current = snapshots if isinstance(snapshots, list) else list(snapshots)
        if len(current) != len(known):
            return None
        if not _same_items(current, known):
            # By index over the typed lists: enumerate() over them ran as a generic
            # iterator, some 150 instructions a cluster, at every heartbeat for every shape.
            facts = board.facts
            for index in range(len(current)):
                snapshot = current[index]
                if snapshot is known[index]:
                    continue
                if snapshot.name != facts[index].name:
                    return None
                facts[index] = self.facts(snapshot)
                refreshed.add(index)
        if refreshed:  # a copy: the caller may update its list in place
            board.snapshots = list(current)
        positions = set(refreshed)
        where = board.position
        for name in changed:
            found = where.get(name)
            if found is not None:
                positions.add(found)
        return positions, refreshed
