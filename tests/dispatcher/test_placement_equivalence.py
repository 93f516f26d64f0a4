"""Placement as the hub runs it decides exactly as a full scan of every cluster.

The hub's `Placer` keeps, per job shape, a ranked board of every cluster's verdict and
judges again only the clusters that changed, and per cluster one packing heap per kind of pod
shared by every shape with such pods. The reference here is the plain path: every cluster
judged afresh for every decision (a new `PlacementCache`, reservations without a change log),
ranked by sorting. Fleets and jobs are drawn at random: node pools with GPUs and taints,
clusters that are unhealthy, stale, restricted to namespaces or labelled, and jobs from a few
pod sizes in several replica counts and kinds (a PyTorchJob's master and workers are often one
kind of pod), through placements, releases, heartbeats and passing time.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatcher.gang_fit import Usage
from dispatcher.placement import (
    LISTED_FEASIBLE,
    LISTED_REJECTED,
    Placement,
    Placer,
    plan_placement,
)
from dispatcher.placement_cache import PlacementCache
from dispatcher.placement_config import PlacementConfig
from dispatcher.reservation_versions import VersionedReservations
from dispatcher.reservations import Reservations
from schemas.cluster import ClusterSnapshot, NodeSnapshot, Taint
from schemas.events import PlacementDecision
from schemas.job_parsing import parse_job
from schemas.kubeflow import AnyJob

GI = 2**30
START = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
POD_SIZES = (
    ("1", "4Gi", 0),
    ("2", "8Gi", 0),
    ("8", "32Gi", 0),
    ("4", "16Gi", 1),
    ("500m", "1Gi", 0),
)
"""Pod sizes of the job templates: cpu, memory, GPUs."""
POOLS: tuple[tuple[dict[str, int], dict[str, str], list[Taint]], ...] = (
    ({"cpu": 16, "memory": 64 * GI, "pods": 110}, {}, []),
    ({"cpu": 64, "memory": 256 * GI, "pods": 110}, {"zone": "b"}, []),
    (
        {"cpu": 32, "memory": 128 * GI, "pods": 110, "nvidia.com/gpu": 4},
        {"nvidia.com/gpu.product": "H100", "zone": "a"},
        [Taint(key="gpu", value="yes", effect="NoSchedule")],
    ),
    ({"cpu": 8, "memory": 32 * GI, "pods": 4}, {"zone": "a"}, []),
)
"""Node pools: allocatable, labels, taints."""
SCORINGS = (
    {"least-allocated": 1.0},
    {"most-allocated": 1.0},
    {"least-allocated": 1.0, "gpu-model": 2.0, "cluster-affinity": 1.0, "cost": 0.5},
    {"most-allocated": 1.0, "cluster-weight": 1.0},
)


class Fleet:
    """Clusters as their workers would report them, with the jobs running on each."""

    def __init__(self, rng: random.Random, count: int) -> None:
        self.rng = rng
        self.names = [f"c{i:03d}" for i in range(count)]
        self.nodes = {name: self._nodes(name) for name in self.names}
        self.running: dict[str, dict[str, Usage]] = {name: {} for name in self.names}
        self.sequence = 0
        self.now = START
        self.snapshots = {name: self.heartbeat(name) for name in self.names}

    def _nodes(self, cluster: str) -> list[tuple[str, int]]:
        """(node name, pool) of the cluster's nodes, in one or two pools."""
        pools = self.rng.sample(range(len(POOLS)), self.rng.randint(1, 2))
        return [(f"{cluster}-n{i}", pools[i % len(pools)]) for i in range(self.rng.randint(1, 12))]

    def heartbeat(self, cluster: str) -> ClusterSnapshot:
        rng = self.rng
        requested: dict[str, dict[str, Any]] = {}
        for usage in self.running[cluster].values():
            for node, amounts in usage.items():
                slot = requested.setdefault(node, {})
                for resource, amount in amounts.items():
                    slot[resource] = slot.get(resource, 0) + amount
        nodes = []
        for name, pool in self.nodes[cluster]:
            allocatable, labels, taints = POOLS[pool]
            held = requested.get(name, {})
            if rng.random() < 0.2:  # pods trainhub did not place
                held = {**held, "cpu": held.get("cpu", 0) + rng.randint(0, 4)}
            nodes.append(
                NodeSnapshot(
                    name=name,
                    allocatable=allocatable,
                    requested=held,
                    labels=labels,
                    taints=taints,
                )
            )
        self.sequence += 1
        return ClusterSnapshot(
            name=cluster,
            nodes=nodes,
            observedAt=self.now - timedelta(seconds=rng.choice([0, 0, 0, 0, 5, 45])),
            sequence=self.sequence,
            healthy=rng.random() > 0.05,
            namespaces=rng.choice([None, None, None, ["default"]]),
            labels={"region": rng.choice(["eu", "us"]), "tier": rng.choice(["gold", "iron"])},
            weight=rng.choice([None, 10.0, 90.0]),
            cost=rng.choice([None, 1.0, 3.0]),
            jobs=sorted(self.running[cluster]),
        )


def job_document(rng: random.Random, index: int) -> dict[str, Any]:
    cpu, memory, gpus = rng.choice(POD_SIZES)
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
        spec["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
        if rng.random() < 0.5:
            spec["nodeSelector"] = {"nvidia.com/gpu.product": "H100"}
    elif rng.random() < 0.15:
        spec["nodeSelector"] = {"zone": rng.choice(["a", "b"])}
    resources: dict[str, Any] = {"requests": requests}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": gpus}
    spec["containers"][0]["resources"] = resources
    kind, field, container = rng.choice(
        [("JAXJob", "jaxReplicaSpecs", "jax"), ("PyTorchJob", "pytorchReplicaSpecs", "pytorch")]
    )
    spec["containers"][0]["name"] = container
    types: dict[str, Any] = {"Worker": {"replicas": rng.randint(1, 4), "template": {"spec": spec}}}
    if kind == "PyTorchJob":
        types["Master"] = {"replicas": 1, "template": {"spec": spec}}
    annotations = {}
    if rng.random() < 0.1:
        annotations["trainhub.io/cluster-selector"] = "region=eu"
    if rng.random() < 0.2:
        annotations["trainhub.io/preferred-cluster-labels"] = "tier=gold"
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {
            "name": f"j{index}",
            "namespace": rng.choice(["default", "default", "team"]),
            "annotations": annotations,
        },
        "spec": {"runPolicy": {"managedBy": "trainhub.io/dispatcher"}, field: types},
    }


def full_scan(
    job: AnyJob,
    clusters: list[ClusterSnapshot],
    reservations: Reservations,
    placer: Placer,
    now: datetime,
    excluded: frozenset[str],
) -> Placement:
    """Every cluster judged afresh: no cache kept, no change log to follow."""
    return plan_placement(
        job,
        clusters,
        reservations=reservations,
        scorer=placer.scorer,
        now=now,
        excluded=excluded,
        cache=PlacementCache(),
        explain=True,
    )


def assert_summarises(decision: PlacementDecision, full: PlacementDecision) -> None:
    """The decision lists the best feasible clusters of the full list (and the chosen one),
    and, having chosen none, the first rejected ones; its counts are the full list's."""
    every = full.clusters
    feasible = [c for c in every if c.feasible]
    rejected = [c for c in every if not c.feasible]
    expected = feasible[:LISTED_FEASIBLE]
    if decision.chosen is not None and all(c.name != decision.chosen for c in expected):
        expected += [c for c in feasible if c.name == decision.chosen]
    if decision.chosen is None:
        expected += rejected[:LISTED_REJECTED]
    assert decision.clusters == expected
    assert (decision.considered, decision.feasible) == (len(every), len(feasible))
    assert decision.rejected is not None and sum(decision.rejected.values()) == len(rejected)
    assert full.counts() == decision.counts()


@pytest.mark.parametrize("seed", range(24))
def test_the_hubs_placement_decides_as_a_full_scan(seed: int) -> None:
    rng = random.Random(seed)
    fleet = Fleet(rng, rng.choice([3, 12, 40]))
    placer = Placer(
        PlacementConfig(scoring=rng.choice(SCORINGS), gpu_product_label="nvidia.com/gpu.product")
    )
    versioned, plain = VersionedReservations(), Reservations()
    placed: list[tuple[str, str]] = []
    decisions = chosen = 0
    for step in range(240):
        action = rng.random()
        if action < 0.6:
            job = parse_job(job_document(rng, step))
            listed = [fleet.snapshots[n] for n in fleet.names]
            excluded = frozenset(rng.sample(fleet.names, 1) if rng.random() < 0.1 else ())
            explain = rng.random() < 0.3
            fast = placer.plan(
                job,
                listed,
                reservations=versioned,
                now=fleet.now,
                excluded=excluded,
                explain=explain,
            )
            slow = full_scan(job, listed, plain, placer, fleet.now, excluded)
            assert fast.chosen == slow.chosen, step
            assert fast.usage == slow.usage, step
            assert fast.decision == slow.decision, step
            assert fast.complete == (explain or fast.chosen is None), step
            if fast.complete:
                assert fast.full_decision() == slow.full_decision(), step
                assert fast.parts == slow.parts, step
            else:
                assert fast.parts == {n: slow.parts[n] for n in fast.parts}, step
            assert_summarises(slow.decision, slow.full_decision())
            assert fast.never_fits == slow.never_fits, step
            decisions += 1
            if fast.chosen is not None:
                chosen += 1
                versioned.reserve(fast.chosen, job.uid, fast.usage)
                plain.reserve(fast.chosen, job.uid, fast.usage)
                fleet.running[fast.chosen][job.uid] = fast.usage
                placed.append((fast.chosen, job.uid))
        elif action < 0.75 and placed:  # a job ends
            cluster, uid = placed.pop(rng.randrange(len(placed)))
            del fleet.running[cluster][uid]
            versioned.release(uid)
            plain.release(uid)
        elif action < 0.95:  # a heartbeat: the same nodes, their pods as they run now
            name = rng.choice(fleet.names)
            snapshot = fleet.snapshots[name] = fleet.heartbeat(name)
            versioned.reconcile(snapshot)
            plain.reconcile(snapshot)
        else:
            fleet.now += timedelta(seconds=rng.choice([1, 10, 40]))
    assert versioned.count() == plain.count()
    assert decisions > 100 and chosen > 20  # the scenario places jobs, not only refuses them


def test_job_shapes_with_one_kind_of_pod_share_a_clusters_packing_heap() -> None:
    rng = random.Random(1)
    fleet = Fleet(rng, 1)
    fleet.nodes["c000"] = [(f"c000-n{i}", 1) for i in range(8)]
    fleet.snapshots["c000"] = snapshot = fleet.heartbeat("c000").model_copy(
        update={"healthy": True, "namespaces": None, "observedAt": fleet.now}
    )
    placer = Placer()
    reservations = VersionedReservations()
    for index, replicas in enumerate((2, 3, 4, 2)):
        document = job_document(rng, index)
        document["kind"], document["metadata"]["annotations"] = "JAXJob", {}
        document["metadata"]["namespace"] = "default"
        pod = {
            "containers": [{"name": "jax", "image": "x", "resources": {"requests": {"cpu": "2"}}}]
        }
        document["spec"] = {
            "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
            "jaxReplicaSpecs": {"Worker": {"replicas": replicas, "template": {"spec": pod}}},
        }
        job = parse_job(document)
        placement = placer.plan(job, [snapshot], reservations=reservations, now=fleet.now)
        assert placement.chosen == "c000"
        reservations.reserve("c000", job.uid, placement.usage)
    facts = placer.cache.facts(snapshot)
    assert len(facts.shapes) == 3  # three job shapes (2, 3 and 4 workers) ...
    assert len(facts.packings) == 1  # ... and one kind of pod, packed from one heap
