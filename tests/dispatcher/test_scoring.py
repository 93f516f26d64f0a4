"""Scoring policies: each rates 0..100, explains itself, and weights combine them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from dispatcher.placement import Placer, plan_placement
from dispatcher.placement_config import PlacementConfig
from dispatcher.scoring import NEUTRAL, WeightedScorer
from schemas.cluster import ClusterSnapshot, NodeSnapshot
from schemas.job_parsing import parse_job
from tests.helpers import cluster, jax_job, node

GPU = "nvidia.com/gpu.product"


def gpu_node(name: str, product: str, gpus: str = "8") -> NodeSnapshot:
    return NodeSnapshot(
        name=name,
        allocatable={"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": gpus},
        labels={GPU: product},
    )


def gpu_job(name: str, **extra: Any) -> dict[str, Any]:
    doc = jax_job(name, workers=1, extra_resources={"nvidia.com/gpu": "1"})
    doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"].update(extra)
    return doc


def scores_of(placement: Any) -> dict[str, float | None]:
    return {c.name: c.score for c in placement.decision.clusters}


def test_gpu_model_prefers_the_cluster_whose_gpus_are_the_product_asked_for() -> None:
    mixed = cluster("mixed", gpu_node("a", "H100"), gpu_node("b", "A100"), gpu_node("c", "A100"))
    h100 = cluster("h100", gpu_node("a", "H100"), gpu_node("b", "H100"))
    a100 = cluster("a100", gpu_node("a", "A100"))
    placer = Placer(PlacementConfig(scoring={"gpu-model": 1}))
    job = parse_job(gpu_job("pick", nodeSelector={GPU: "H100"}))
    placement = placer.plan(job, [mixed, a100, h100], explain=True)
    assert placement.chosen == "h100"
    scores = scores_of(placement)
    assert scores["h100"] == 100.0
    assert scores["mixed"] == pytest.approx(33.333, abs=0.001)
    rejected = next(c for c in placement.full_decision().clusters if c.name == "a100")
    assert not rejected.feasible and f"nodeSelector {GPU}=H100" in (rejected.reason or "")
    assert placement.parts["h100"] == (("gpu-model", 100.0),)


def test_gpu_model_reads_preferred_node_affinity_by_weight() -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 80,
                    "preference": {
                        "matchExpressions": [{"key": GPU, "operator": "In", "values": ["H100"]}]
                    },
                },
                {
                    "weight": 20,
                    "preference": {
                        "matchExpressions": [{"key": GPU, "operator": "In", "values": ["A100"]}]
                    },
                },
            ]
        }
    }
    job = parse_job(gpu_job("soft", affinity=affinity))
    h100 = cluster("h100", gpu_node("a", "H100"))
    a100 = cluster("a100", gpu_node("a", "A100"))
    t4 = cluster("t4", gpu_node("a", "T4"))
    placement = Placer(PlacementConfig(scoring={"gpu-model": 1})).plan(job, [a100, t4, h100])
    assert placement.chosen == "h100"
    assert scores_of(placement) == {"h100": 100.0, "a100": 25.0, "t4": 0.0}


def test_gpu_model_uses_the_configured_label_and_is_neutral_without_a_wish() -> None:
    made = gpu_node("a", "ignored")
    made.labels["gpu.vendor.example/model"] = "MI300"
    amd = cluster("amd", made)
    config = PlacementConfig(scoring={"gpu-model": 1}, gpu_product_label="gpu.vendor.example/model")
    wish = parse_job(gpu_job("amd", nodeSelector={"gpu.vendor.example/model": "MI300"}))
    assert scores_of(Placer(config).plan(wish, [amd]))["amd"] == 100.0
    no_wish = parse_job(gpu_job("any"))
    assert scores_of(Placer(config).plan(no_wish, [amd]))["amd"] == NEUTRAL


def test_cluster_affinity_scores_preferred_cluster_labels() -> None:
    doc = jax_job("near", workers=1)
    doc["metadata"]["annotations"] = {
        "trainhub.io/preferred-cluster-labels": "region=eu,tier in (gold,silver),!spot"
    }
    eu_gold = cluster(
        "eu-gold", node("a", cpu="8", memory="8Gi"), labels={"region": "eu", "tier": "gold"}
    )
    eu_spot = cluster(
        "eu-spot", node("a", cpu="8", memory="8Gi"), labels={"region": "eu", "spot": "true"}
    )
    us = cluster("us", node("a", cpu="8", memory="8Gi"), labels={"region": "us"})
    placement = Placer(PlacementConfig(scoring={"cluster-affinity": 1})).plan(
        parse_job(doc), [us, eu_spot, eu_gold]
    )
    assert placement.chosen == "eu-gold"
    assert scores_of(placement) == {"eu-gold": 100.0, "eu-spot": 33.333, "us": 33.333}


def test_cluster_selector_annotation_is_a_hard_filter_and_never_fits_elsewhere() -> None:
    doc = jax_job("pinned", workers=1)
    doc["metadata"]["annotations"] = {"trainhub.io/cluster-selector": "region=eu"}
    us = cluster("us", node("a", cpu="8", memory="8Gi"), labels={"region": "us"})
    placement = plan_placement(parse_job(doc), [us])
    assert placement.chosen is None and placement.never_fits
    assert (
        "cluster labels do not satisfy the job's trainhub.io/cluster-selector (region in (eu))"
        in (placement.decision.clusters[0].reason or "")
    )
    eu = cluster("eu", node("a", cpu="8", memory="8Gi"), labels={"region": "eu"})
    assert plan_placement(parse_job(doc), [us, eu]).chosen == "eu"


def test_a_malformed_cluster_annotation_is_the_jobs_problem() -> None:
    doc = jax_job("typo", workers=1)
    doc["metadata"]["annotations"] = {"trainhub.io/cluster-selector": "region=(eu"}
    placement = plan_placement(parse_job(doc), [cluster("c", node("a", cpu="8", memory="8Gi"))])
    assert placement.never_fits and placement.chosen is None
    assert "metadata.annotations[trainhub.io/cluster-selector]" in (placement.problem or "")
    assert placement.decision.clusters[0].reason == placement.problem
    # A job problem is known before any cluster registered.
    assert plan_placement(parse_job(doc), []).never_fits


def test_static_weight_and_cost() -> None:
    job = parse_job(jax_job("w", workers=1))
    cheap = cluster("cheap", node("a", cpu="8", memory="8Gi"), cost=1.0, weight=20.0)
    dear = cluster("dear", node("a", cpu="8", memory="8Gi"), cost=4.0, weight=90.0)
    plain = cluster("plain", node("a", cpu="8", memory="8Gi"))
    by_cost = Placer(PlacementConfig(scoring={"cost": 1})).plan(job, [dear, plain, cheap])
    assert by_cost.chosen == "cheap"
    assert scores_of(by_cost) == {"cheap": 75.0, "dear": 0.0, "plain": NEUTRAL}
    by_weight = Placer(PlacementConfig(scoring={"cluster-weight": 1})).plan(
        job, [cheap, dear, plain]
    )
    assert by_weight.chosen == "dear"
    assert scores_of(by_weight) == {"dear": 90.0, "plain": NEUTRAL, "cheap": 20.0}


def test_weights_combine_and_every_policy_is_explained() -> None:
    job = parse_job(jax_job("mix", workers=1, cpu="4", memory="4Gi"))
    busy = cluster("busy", node("a", {"cpu": "4"}, cpu="8", memory="8Gi"), weight=100.0)
    idle = cluster("idle", node("a", cpu="8", memory="8Gi"), weight=0.0)
    config = PlacementConfig(scoring={"least-allocated": 1, "cluster-weight": 3})
    placement = Placer(config).plan(job, [busy, idle])
    assert placement.chosen == "busy"
    parts = {name: dict(p) for name, p in placement.parts.items()}
    assert parts["idle"] == {"least-allocated": 50.0, "cluster-weight": 0.0}
    assert parts["busy"] == {"least-allocated": 25.0, "cluster-weight": 100.0}
    assert scores_of(placement) == {"busy": 81.25, "idle": 12.5}


def test_most_allocated_packs() -> None:
    job = parse_job(jax_job("pack", workers=1, cpu="1", memory="1Gi"))
    busy = cluster("busy", node("a", {"cpu": "6", "memory": "6Gi"}, cpu="8", memory="8Gi"))
    idle = cluster("idle", node("a", cpu="8", memory="8Gi"))
    placement = Placer(PlacementConfig(scoring={"most-allocated": 1})).plan(job, [idle, busy])
    assert placement.chosen == "busy"


def test_scorer_refuses_unknown_names_and_negative_weights() -> None:
    with pytest.raises(ValueError, match="unknown scoring policies"):
        WeightedScorer.from_weights({"cheapest": 1})
    with pytest.raises(ValueError, match=">= 0"):
        WeightedScorer.from_weights({"cost": -1})


def test_scores_stay_within_0_and_100() -> None:
    job = parse_job(jax_job("tiny", workers=1, cpu="1", memory="1Gi"))
    over = ClusterSnapshot.model_validate(
        {
            "name": "over",
            "nodes": [
                {"name": "a", "allocatable": {"cpu": "8", "memory": "8Gi"}, "requested": {}},
                {"name": "b", "allocatable": {"cpu": "1"}, "requested": {"cpu": "9"}},
            ],
            "weight": 100,
            "cost": 0,
        }
    )
    config = PlacementConfig(
        scoring={n: 1 for n in ("least-allocated", "most-allocated", "cluster-weight", "cost")}
    )
    placement = Placer(config).plan(job, [over])
    for _, score in placement.parts["over"]:
        assert 0.0 <= score <= 100.0
    assert Decimal(str(placement.decision.clusters[0].score)) <= 100


def test_a_job_without_pods_is_refused_rather_than_left_created_forever() -> None:
    doc = jax_job("empty", workers=0)
    placement = plan_placement(parse_job(doc), [cluster("c", node("a", cpu="8", memory="8Gi"))])
    assert placement.never_fits and placement.chosen is None
    assert "every replica type has 0 replicas" in (placement.problem or "")
