"""Placement's shortcuts over the fleet decide as the straightforward way does: a snapshot's
facts made once per node pool, the fleet's list compared at once, ties ranked without sorting."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.amounts import Amount, compact
from dispatcher.placement import Placer, plan_placement
from dispatcher.placement_cache import ClusterFacts, PlacementCache
from dispatcher.placement_config import PlacementConfig
from dispatcher.reservation_versions import VersionedReservations
from dispatcher.reservations import Reservations
from schemas.cluster import ClusterSnapshot, NodeSnapshot
from schemas.job_parsing import parse_job
from schemas.kubeflow import AnyJob

GI = 2**30
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)

_amounts = st.sampled_from([Decimal(0), Decimal(1), Decimal("0.5"), Decimal("2.25"), Decimal(64)])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_facts_equal_the_straightforward_sums(data: st.DataObject) -> None:
    draw = data.draw
    shared = {"cpu": Decimal(8), "memory": Decimal(16 * GI), "pods": Decimal(110)}
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            allocatable = shared  # one object for a pool, as the bench builds them
        elif kind == 1:
            allocatable = dict(shared)  # equal, another object
        elif kind == 2:
            allocatable = dict(reversed(list(shared.items())))  # equal, other key order
        else:
            allocatable = {"cpu": draw(_amounts), "memory": draw(_amounts)}
        requested = {r: draw(_amounts) for r in draw(st.lists(st.sampled_from(["cpu", "gpu"])))}
        nodes.append(
            NodeSnapshot.model_construct(
                name=f"n{i}", allocatable=allocatable, requested=requested, labels={}, taints=[]
            )
        )
    facts = ClusterFacts(ClusterSnapshot(name="c", nodes=nodes, observedAt=NOW))
    capacity: dict[str, Amount] = {}
    free: dict[str, Amount] = {}
    for node, left in zip(nodes, facts.base_free, strict=True):
        expected = {r: compact(a - node.requested.get(r, 0)) for r, a in node.allocatable.items()}
        assert left == expected
        assert list(left) == list(expected)  # the same order: scores sum in it
        assert all(type(left[r]) is type(expected[r]) for r in expected)
        for resource, amount in node.allocatable.items():
            capacity[resource] = capacity.get(resource, 0) + compact(amount)
            free[resource] = free.get(resource, 0) + max(expected[resource], 0)
    assert facts.capacity == capacity and list(facts.capacity) == list(capacity)
    assert facts.free == free
    assert facts.pod_slot == ["pods" in n.allocatable for n in nodes]


def _cluster(name: str, cpu: int, sequence: int = 0) -> ClusterSnapshot:
    nodes = [
        NodeSnapshot(name=f"{name}-{i}", allocatable={"cpu": cpu, "memory": 64 * GI, "pods": 110})
        for i in range(3)
    ]
    return ClusterSnapshot(name=name, nodes=nodes, observedAt=NOW, sequence=sequence)


def _job(index: int, cpu: str, replicas: int) -> AnyJob:
    spec = {
        "containers": [
            {"name": "jax", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}
        ]
    }
    return parse_job(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "JAXJob",
            "metadata": {"name": f"j{index}", "namespace": "default"},
            "spec": {
                "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
                "jaxReplicaSpecs": {"Worker": {"replicas": replicas, "template": {"spec": spec}}},
            },
        }
    )


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), in_name_order=st.booleans())
def test_boards_over_alike_clusters_decide_as_fresh_plans(seed: int, in_name_order: bool) -> None:
    """Alike clusters tie on their scores by the dozen; the list may come in any order, and a
    heartbeat may bring an equal copy of a snapshot or a new one."""
    rng = random.Random(seed)
    names = [f"c{i:02d}" for i in range(rng.randint(2, 24))]
    clusters = {n: _cluster(n, rng.choice([8, 8, 8, 16])) for n in names}
    order = list(names)
    if not in_name_order:
        rng.shuffle(order)
    placer = Placer(PlacementConfig())
    versioned, plain = VersionedReservations(), Reservations()
    placed: list[str] = []
    sequence = 0
    for step in range(60):
        action = rng.randint(0, 9)
        if action <= 5:
            job = _job(step, rng.choice(["1", "2", "500m"]), rng.randint(1, 4))
            listed = [clusters[n] for n in order]
            fast = placer.plan(job, listed, reservations=versioned, now=NOW)
            slow = plan_placement(
                job,
                listed,
                reservations=plain,
                scorer=placer.scorer,
                now=NOW,
                cache=PlacementCache(),
            )
            assert fast.decision == slow.decision
            assert fast.usage == slow.usage
            if fast.chosen is not None:
                versioned.reserve(fast.chosen, job.uid, fast.usage)
                plain.reserve(fast.chosen, job.uid, fast.usage)
                placed.append(job.uid)
        elif action == 6 and placed:
            uid = placed.pop(rng.randrange(len(placed)))
            versioned.release(uid)
            plain.release(uid)
        elif action == 7:
            name = rng.choice(names)
            clusters[name] = clusters[name].model_copy()  # an equal snapshot, another object
        else:
            name = rng.choice(names)
            sequence += 1
            snapshot = _cluster(name, rng.choice([8, 16]), sequence)
            snapshot = snapshot.model_copy(update={"jobs": list(placed)})
            clusters[name] = snapshot
            versioned.reconcile(snapshot)
            plain.reconcile(snapshot)
