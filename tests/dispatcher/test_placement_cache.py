"""The fast paths of placement decide exactly as the plain algorithm does.

`reference_gang_fit` is the straightforward per-pod best fit placement started with (every
node scanned for every pod); the heap, the slot counting and the caches must agree with it
on the usage and on the reason, and cached decisions must equal fresh ones through any
sequence of placements, releases, heartbeats and passing time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.amounts import Amount
from dispatcher.demand import PodDemand, job_demand, packing_order
from dispatcher.gang_fit import (
    FitResult,
    NodeRoom,
    Usage,
    admission_problem,
    admitting_nodes,
    gang_fit,
    largest_pod,
    surely_fits,
)
from dispatcher.placement import Placer, plan_placement
from dispatcher.placement_cache import PlacementCache, to_thousandths
from dispatcher.placement_config import PlacementConfig
from dispatcher.reservation_versions import VersionedReservations
from dispatcher.reservations import Reservations
from schemas.cluster import ClusterPolicy, ClusterSnapshot, NodeSnapshot, Taint
from schemas.job_parsing import parse_job
from schemas.quantity import format_quantity

GI = 2**30
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
T = TypeVar("T")


class Draw(Protocol):
    """What draws a value: a composite strategy's `draw` or a test's `data.draw` (which is
    not a `st.DrawFn`: that protocol also asks for a `__signature__`)."""

    def __call__(self, strategy: st.SearchStrategy[T], label: Any = None) -> T: ...


# -- the plain algorithm, as a reference ----------------------------------------------------


def _needs(demand: PodDemand, node: NodeRoom) -> dict[str, Amount]:
    needs = dict(demand.requests)
    if "pods" in node.free:
        needs["pods"] = needs.get("pods", Decimal(0)) + 1
    return needs


def _room_after(node: NodeRoom, needs: dict[str, Amount]) -> Amount | None:
    slack: Amount | None = None
    for resource, amount in needs.items():
        if amount <= 0:
            continue
        left = node.free.get(resource, Decimal(0)) - amount
        if left < 0:
            return None
        slack = left if slack is None else min(slack, left)
    return slack if slack is not None else Decimal(0)


def _shortage(nodes: list[NodeRoom], demand: PodDemand, placed: int) -> str:
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


def reference_gang_fit(nodes: list[NodeRoom], demands: list[PodDemand]) -> FitResult:
    rooms = [NodeRoom(n.name, dict(n.free), n.labels, n.taints) for n in nodes]
    usage: Usage = {}
    for demand in packing_order(demands):
        for placed in range(demand.count):
            best: tuple[Amount, NodeRoom, dict[str, Amount]] | None = None
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


def _assert_packing(nodes: list[NodeRoom], demands: list[PodDemand], usage: Usage) -> None:
    """`usage` holds every pod of the gang, on admitting nodes, within their free amounts."""
    wanted: dict[str, Decimal] = {}
    for demand in demands:
        for resource, amount in demand.requests.items():
            wanted[resource] = wanted.get(resource, Decimal(0)) + amount * demand.count
    by_name = {n.name: n for n in nodes}
    placed: dict[str, Decimal] = {}
    for name, used in usage.items():
        node = by_name[name]
        assert any(admission_problem(node, d) is None for d in demands)
        for resource, amount in used.items():
            if amount > 0:
                assert amount <= node.free.get(resource, Decimal(0)), (name, resource)
            if resource != "pods":
                placed[resource] = placed.get(resource, Decimal(0)) + amount
    assert {r: a for r, a in placed.items() if a} == {r: a for r, a in wanted.items() if a}


# -- strategies -----------------------------------------------------------------------------

amounts = st.sampled_from([Decimal(0), Decimal("0.5"), Decimal(1), Decimal(2), Decimal(4)])


@st.composite
def node_rooms(draw: st.DrawFn, index: int) -> NodeRoom:
    free: dict[str, Amount] = {"cpu": draw(amounts), "memory": draw(amounts) * GI}
    if draw(st.booleans()):
        free["pods"] = draw(st.sampled_from([Decimal(0), Decimal(1), Decimal(3), Decimal(110)]))
    if draw(st.booleans()):
        free["nvidia.com/gpu"] = draw(st.sampled_from([Decimal(-1), Decimal(0), Decimal(2)]))
    labels = {"zone": draw(st.sampled_from(["a", "b"]))}
    taints = (
        [Taint(key="dedicated", value="ml", effect="NoSchedule")]
        if draw(st.integers(0, 5)) == 0
        else []
    )
    return NodeRoom(f"n{index}", free, labels, taints)


@st.composite
def pod_demands(draw: st.DrawFn, replica_type: str) -> PodDemand:
    requests = {"cpu": draw(amounts), "memory": draw(amounts) * GI}
    if draw(st.integers(0, 3)) == 0:
        requests["nvidia.com/gpu"] = draw(st.sampled_from([Decimal(1), Decimal(2)]))
    selector = {"zone": "a"} if draw(st.integers(0, 4)) == 0 else {}
    return PodDemand(replica_type, draw(st.integers(1, 5)), requests, selector)


@st.composite
def gangs(draw: st.DrawFn) -> tuple[list[NodeRoom], list[PodDemand]]:
    nodes = [draw(node_rooms(i)) for i in range(draw(st.integers(0, 6)))]
    types = draw(st.sampled_from([["Worker"], ["Master", "Worker"], ["A", "B", "C"]]))
    return nodes, [draw(pod_demands(t)) for t in types]


@settings(max_examples=400, deadline=None)
@given(gangs())
def test_gang_fit_matches_the_plain_algorithm(gang: tuple[list[NodeRoom], list[PodDemand]]) -> None:
    nodes, demands = gang
    expected = reference_gang_fit(nodes, demands)
    actual = gang_fit(nodes, demands)
    if expected.fits or not actual.fits:
        assert actual == expected
    else:
        # Greedy best fit stranded this gang of several types; the search found a packing.
        assert len(demands) > 1
        _assert_packing(nodes, demands, actual.usage)
    ordered = packing_order(demands)
    candidates = [admitting_nodes(nodes, d) for d in ordered]
    common = sorted(set(candidates[0]).intersection(*candidates[1:]))
    fits, placed, counted = surely_fits(
        lambda i: nodes[i].free,
        ["pods" in n.free for n in nodes],
        ordered,
        candidates,
        common,
        largest_pod(ordered) if len(ordered) > 1 else None,
    )
    if fits is not None:
        assert fits == actual.fits
    if fits:  # the nodes counted alone hold the gang (or its largest pod)
        assert counted
        assert surely_fits(
            lambda i: nodes[i].free,
            ["pods" in n.free for n in nodes],
            ordered,
            [list(counted)] * len(ordered),
            counted,
            largest_pod(ordered) if len(ordered) > 1 else None,
        )[0]
    if fits is False:
        assert (
            f"room for {placed} of" in (expected.reason or "")
            or "does not fit" in (expected.reason or "")
            or "no node admits" in (expected.reason or "")
        )


# -- cached decisions equal fresh ones ---------------------------------------------------------


def _job(index: int, draw: Draw) -> dict[str, Any]:
    cpu = draw(st.sampled_from(["1", "2", "500m"]))
    spec: dict[str, Any] = {
        "containers": [
            {"name": "jax", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}
        ]
    }
    kind = draw(st.integers(0, 14))
    if kind == 0:
        spec["nodeSelector"] = {"zone": "a"}
    elif kind == 1:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "NotIn", "values": ["b"]}
                            ]
                        }
                    ]
                }
            }
        }
    elif kind == 2:
        spec["hostNetwork"] = True  # holds the JAX port, 6666, on its node
    elif kind == 3:
        spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    annotations = {}
    if draw(st.integers(0, 5)) == 0:
        annotations["trainhub.io/cluster-selector"] = "region=eu"
    if draw(st.integers(0, 5)) == 0:
        annotations["trainhub.io/preferred-cluster-labels"] = "tier=gold"
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "JAXJob",
        "metadata": {
            "name": f"j{index}",
            "namespace": draw(st.sampled_from(["default", "default", "team"])),
            "annotations": annotations,
        },
        "spec": {
            "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
            "jaxReplicaSpecs": {
                "Worker": {"replicas": draw(st.integers(1, 3)), "template": {"spec": spec}}
            },
        },
    }


_held_ports = st.sampled_from([[], [], ["TCP/6666"], ["TCP/8080"], ["TCP/6666", "TCP/8080"]])


def _snapshot(name: str, draw: Draw, sequence: int, at: datetime) -> ClusterSnapshot:
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        cpu = draw(st.sampled_from([2, 4, 8]))
        nodes.append(
            NodeSnapshot(
                name=f"{name}-{i}",
                allocatable={"cpu": cpu, "memory": 16 * GI, "pods": 110},
                requested={"cpu": draw(st.integers(0, cpu))},
                labels={"zone": draw(st.sampled_from(["a", "b"]))},
                hostPorts=draw(_held_ports),
            )
        )
    return ClusterSnapshot(
        name=name,
        nodes=nodes,
        observedAt=at,
        sequence=sequence,
        healthy=draw(st.integers(0, 9)) > 0,
        namespaces=draw(st.sampled_from([None, None, ["default"]])),
        labels={"region": draw(st.sampled_from(["eu", "us"])), "tier": "gold"},
        policy=ClusterPolicy(allowHostNetwork=draw(st.booleans())),
        weight=draw(st.sampled_from([None, 10.0, 90.0])),
        cost=draw(st.sampled_from([None, 1.0, 3.0])),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_cached_decisions_equal_fresh_ones(data: st.DataObject) -> None:
    draw = data.draw
    names = ["east", "north", "west"]
    now = NOW
    sequence = 0
    clusters = {n: _snapshot(n, draw, 0, now) for n in names}
    weights = draw(
        st.sampled_from(
            [
                {"least-allocated": 1.0},
                {"most-allocated": 1.0, "cluster-weight": 1.0},
                {"least-allocated": 1.0, "cost": 2.0, "cluster-affinity": 1.0},
                {"most-allocated": 1.0, "gpu-model": 2.0, "cluster-weight": 1.0},
            ]
        )
    )
    # gpu-model reads the zone label: jobs ask for a zone by nodeSelector or affinity.
    placer = Placer(PlacementConfig(scoring=weights, gpu_product_label="zone"))
    versioned, plain = VersionedReservations(), Reservations()
    placed: list[str] = []
    for step in range(draw(st.integers(5, 40))):
        action = draw(st.integers(0, 9))
        if action <= 5:
            job = parse_job(_job(step, draw))
            listed = [clusters[n] for n in names]
            excluded = frozenset(draw(st.sampled_from([(), (), ("west",)])))
            fast = placer.plan(
                job,
                listed,
                reservations=versioned,
                now=now,
                excluded=excluded,
                max_heartbeat_age=30,
            )
            slow = plan_placement(
                job,
                listed,
                reservations=plain,
                scorer=placer.scorer,
                now=now,
                excluded=excluded,
                max_heartbeat_age=30,
                cache=PlacementCache(),
            )
            assert fast.decision == slow.decision
            assert fast.usage == slow.usage
            assert fast.never_fits == slow.never_fits
            if fast.chosen is not None:
                versioned.reserve(fast.chosen, job.uid, fast.usage)
                plain.reserve(fast.chosen, job.uid, fast.usage)
                placed.append(job.uid)
        elif action <= 6 and placed:
            uid = placed.pop(draw(st.integers(0, len(placed) - 1)))
            versioned.release(uid)
            plain.release(uid)
        elif action == 7 or (action == 8 and draw(st.booleans())):
            name = draw(st.sampled_from(names))
            sequence += 1
            snapshot = _snapshot(name, draw, sequence, now)
            if draw(st.booleans()):  # the same nodes, other pods running on them
                nodes = [
                    n.model_copy(
                        update={
                            "requested": {"cpu": draw(st.integers(0, 2))},
                            "hostPorts": draw(_held_ports),
                        }
                    )
                    for n in clusters[name].nodes
                ]
                # ... and perhaps a new weight from the operator, or other labels
                snapshot = clusters[name].model_copy(
                    update={
                        "nodes": nodes,
                        "sequence": sequence,
                        "observedAt": now,
                        "weight": draw(st.sampled_from([None, 10.0, 90.0])),
                        "labels": {"region": draw(st.sampled_from(["eu", "us"])), "tier": "gold"},
                    }
                )
            seen = draw(st.lists(st.sampled_from(placed), unique=True)) if placed else []
            snapshot = snapshot.model_copy(update={"jobs": seen})
            clusters[name] = snapshot
            versioned.reconcile(snapshot)
            plain.reconcile(snapshot)
        else:
            now += timedelta(seconds=draw(st.sampled_from([1, 20, 40])))
    assert versioned.count() == plain.count()


def test_job_demand_is_read_once_per_replica_type() -> None:
    job = parse_job(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "pt"},
            "spec": {
                "pytorchReplicaSpecs": {
                    role: {
                        "replicas": n,
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "pytorch",
                                        "image": "x",
                                        "resources": {"requests": {"cpu": "1"}},
                                    }
                                ]
                            }
                        },
                    }
                    for role, n in (("Master", 1), ("Worker", 3))
                }
            },
        }
    )
    assert [(d.replica_type, d.count) for d in job_demand(job)] == [("Master", 1), ("Worker", 3)]


def _worker_job(name: str, replicas: int, cpu: str) -> Any:
    container = {"name": "jax", "image": "x", "resources": {"requests": {"cpu": cpu}}}
    return parse_job(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "JAXJob",
            "metadata": {"name": name},
            "spec": {
                "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
                "jaxReplicaSpecs": {
                    "Worker": {
                        "replicas": replicas,
                        "template": {"spec": {"containers": [container]}},
                    }
                },
            },
        }
    )


def test_repeated_placements_on_one_cluster_pack_like_fresh_ones() -> None:
    nodes = [
        NodeSnapshot(name=f"n{i}", allocatable={"cpu": 4 + i, "memory": 64 * GI, "pods": 110})
        for i in range(6)
    ]
    only = ClusterSnapshot(name="only", nodes=nodes, observedAt=NOW)
    placer = Placer()
    versioned, plain = VersionedReservations(), Reservations()
    for i in range(12):
        doc = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "JAXJob",
            "metadata": {"name": f"r{i}"},
            "spec": {
                "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
                "jaxReplicaSpecs": {
                    "Worker": {
                        "replicas": 2,
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "jax",
                                        "image": "x",
                                        "resources": {"requests": {"cpu": str(1 + i % 2)}},
                                    }
                                ]
                            }
                        },
                    }
                },
            },
        }
        job = parse_job(doc)
        fast = placer.plan(job, [only], reservations=versioned, now=NOW)
        slow = plan_placement(job, [only], reservations=plain, now=NOW, cache=PlacementCache())
        assert (fast.decision, fast.usage) == (slow.decision, slow.usage)
        if fast.chosen:
            versioned.reserve("only", job.uid, fast.usage)
            plain.reserve("only", job.uid, fast.usage)
        if i % 3 == 2:
            versioned.release(parse_job({**doc, "metadata": {"name": f"r{i - 2}"}}).uid)
            plain.release(parse_job({**doc, "metadata": {"name": f"r{i - 2}"}}).uid)


def test_packing_follows_a_heartbeat_that_moves_free_capacity_between_nodes() -> None:
    def snapshot(requested: list[int], sequence: int) -> ClusterSnapshot:
        nodes = [
            NodeSnapshot(
                name=f"n{i}",
                allocatable={"cpu": 8, "memory": 64 * GI, "pods": 110},
                requested={"cpu": cpu},
            )
            for i, cpu in enumerate(requested)
        ]
        return ClusterSnapshot(name="one", nodes=nodes, observedAt=NOW, sequence=sequence)

    placer, versioned = Placer(), VersionedReservations()
    first = placer.plan(
        _worker_job("a", 1, "1"), [snapshot([6, 0, 0], 1)], reservations=versioned, now=NOW
    )
    assert first.usage == {"n0": {"cpu": 1, "pods": 1}}
    # The pods on n0 ended and n2 filled up: best fit must now pick n2.
    moved = snapshot([0, 0, 5], 2)
    second = placer.plan(_worker_job("b", 1, "1"), [moved], reservations=versioned, now=NOW)
    fresh = plan_placement(_worker_job("b", 1, "1"), [moved], now=NOW, cache=PlacementCache())
    assert second.usage == fresh.usage == {"n2": {"cpu": 1, "pods": 1}}


def test_a_gang_judged_to_fit_is_judged_again_when_the_nodes_that_held_it_fill_up() -> None:
    # Judging a fitting gang again only rechecks the nodes whose slots made it fit (the last
    # node here): reservations elsewhere keep the verdict, one on that node must overturn it.
    nodes = [
        NodeSnapshot(name=f"n{i}", allocatable={"cpu": cpu, "memory": 64 * GI, "pods": 110})
        for i, cpu in enumerate([2, 8])
    ]
    only = ClusterSnapshot(name="only", nodes=nodes, observedAt=NOW)
    placer, versioned = Placer(), VersionedReservations()
    gang = _worker_job("gang", 4, "2")  # only n1 holds 4 x 2 cpu

    def fits_now() -> bool:
        placement = placer.plan(gang, [only], reservations=versioned, now=NOW)
        fresh = plan_placement(
            gang, [only], reservations=versioned, now=NOW, cache=PlacementCache()
        )
        assert placement.decision == fresh.decision
        return placement.chosen is not None

    assert fits_now()
    versioned.reserve("only", "elsewhere", {"n0": {"cpu": Decimal(2), "pods": Decimal(1)}})
    assert fits_now()  # n0 filled up: the gang still fits on n1
    versioned.reserve("only", "there", {"n1": {"cpu": Decimal(1), "pods": Decimal(1)}})
    assert not fits_now()  # one cpu less on n1: 3 slots of 2 cpu for 4 pods
    versioned.release("there")
    assert fits_now()


def test_extreme_quantities_place_without_arithmetic_errors() -> None:
    huge = NodeSnapshot(name="huge", allocatable={"cpu": "8Ei", "memory": "8Ei", "pods": 110})
    roomy = ClusterSnapshot(name="roomy", nodes=[huge], observedAt=NOW)
    for cpu in ("1e-10", "1n", "8Ei", "7Ei"):
        doc = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "JAXJob",
            "metadata": {"name": "tiny"},
            "spec": {
                "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
                "jaxReplicaSpecs": {
                    "Worker": {
                        "replicas": 3,
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "jax",
                                        "image": "x",
                                        "resources": {"requests": {"cpu": cpu, "memory": "1e-10"}},
                                    }
                                ]
                            }
                        },
                    }
                },
            },
        }
        placement = Placer().plan(
            parse_job(doc), [roomy], reservations=VersionedReservations(), now=NOW
        )
        assert placement.chosen == ("roomy" if cpu not in ("8Ei", "7Ei") else None)


@settings(max_examples=3000, deadline=None)
@given(
    st.one_of(
        st.floats(min_value=-1e6, max_value=1e16, allow_nan=False),
        st.integers(min_value=0, max_value=10**8).map(lambda n: n / 2000),  # halfway cases
        st.integers(min_value=0, max_value=10**8).map(lambda n: n / 1000 + 0.0005),
        # exact binary values halfway between thousandths, as shares of 2^k capacities give
        st.integers(min_value=0, max_value=10**9).map(lambda n: n / 2**14),
        st.integers(min_value=0, max_value=10**7).map(lambda n: (2 * n + 1) / 16),  # x.5 ties
    )
)
def test_scores_round_to_thousandths_exactly_as_round_does(value: float) -> None:
    rounded = round(value, 3)
    assert to_thousandths(value) == rounded
    assert str(to_thousandths(value)) == str(rounded)  # -0.0 included
