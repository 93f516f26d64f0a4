"""Placement: gang fit per node, least-allocated scoring, reasons, reservations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dispatcher.demand import job_demand
from dispatcher.gang_fit import NodeRoom, gang_fit
from dispatcher.placement import Placer, plan_placement
from dispatcher.reservations import Reservations
from schemas.cluster import Taint
from schemas.job_parsing import parse_job
from tests.helpers import cluster, jax_job, node


def test_refuses_cluster_whose_capacity_is_enough_only_in_sum() -> None:
    # 2 workers x 3 cpu = 6 cpu; the fragmented cluster has 8 cpu in sum but 2 per node.
    job = parse_job(jax_job("gang", workers=2, cpu="3", memory="1Gi"))
    fragmented = cluster("fragmented", *[node(f"n{i}", cpu="2", memory="8Gi") for i in range(4)])
    roomy = cluster("roomy", node("big", cpu="6", memory="8Gi"))
    placement = plan_placement(job, [fragmented, roomy], explain=True)
    assert placement.chosen == "roomy"
    rejected = next(c for c in placement.full_decision().clusters if c.name == "fragmented")
    assert not rejected.feasible
    # The decision itself lists the chosen cluster and counts the rejected one by kind.
    assert [c.name for c in placement.decision.clusters] == ["roomy"]
    assert placement.decision.rejected == {"too small for the job": 1}
    assert placement.decision.summary() == (
        "1/2 clusters can take the job now; 1 too small for the job"
    )
    assert "cpu: needs 3 per pod, most on one node 2" in (rejected.reason or "")
    assert placement.usage["big"]["cpu"] == 6


def test_whole_gang_must_fit_at_once() -> None:
    # Each node fits one 3-cpu pod, so 2 nodes hold 2 pods but not 3.
    job = parse_job(jax_job("three", workers=3, cpu="3"))
    two_nodes = cluster("two", node("a", cpu="4", memory="8Gi"), node("b", cpu="4", memory="8Gi"))
    fit = gang_fit([NodeRoom.of(n) for n in two_nodes.nodes], job_demand(job))
    assert not fit.fits
    assert "not enough nodes" in (fit.reason or "")
    placement = plan_placement(job, [two_nodes])
    assert placement.chosen is None and placement.never_fits


def test_least_allocated_prefers_the_emptier_cluster() -> None:
    job = parse_job(jax_job("spread", workers=1, cpu="1", memory="1Gi"))
    busy = cluster("busy", node("a", {"cpu": "6", "memory": "12Gi"}, cpu="8", memory="16Gi"))
    idle = cluster("idle", node("a", cpu="8", memory="16Gi"))
    placement = plan_placement(job, [busy, idle])
    assert placement.chosen == "idle"
    scores = {c.name: c.score for c in placement.decision.clusters}
    assert scores["idle"] is not None and scores["busy"] is not None
    assert scores["idle"] > scores["busy"]


def test_reason_names_the_short_resource_and_never_fits() -> None:
    job = parse_job(jax_job("gpu", workers=1, extra_resources={"nvidia.com/gpu": "4"}))
    cpu_only = cluster("cpu-only", node("a", cpu="64", memory="256Gi"))
    placement = plan_placement(job, [cpu_only])
    assert placement.chosen is None and placement.never_fits
    assert "nvidia.com/gpu: needs 4 per pod, most on one node 0" in (
        placement.decision.clusters[0].reason or ""
    )


def test_busy_now_is_not_never() -> None:
    job = parse_job(jax_job("wait", workers=1, cpu="4"))
    full = cluster("full", node("a", {"cpu": "4"}, cpu="4", memory="8Gi"))
    placement = plan_placement(job, [full])
    assert placement.chosen is None and not placement.never_fits
    assert "not enough free capacity now" in (placement.decision.clusters[0].reason or "")


def test_stale_and_unhealthy_clusters_are_not_candidates() -> None:
    job = parse_job(jax_job("fresh", workers=1))
    old = datetime.now(UTC) - timedelta(minutes=5)
    stale = cluster("stale", node("a", cpu="8", memory="8Gi"), observedAt=old)
    sick = cluster("sick", node("a", cpu="8", memory="8Gi"), healthy=False)
    placement = plan_placement(job, [stale, sick], max_heartbeat_age=30)
    assert placement.chosen is None and not placement.never_fits
    reasons = {c.name: c.reason for c in placement.decision.clusters}
    assert "stale" in (reasons["stale"] or "") and "unhealthy" in (reasons["sick"] or "")


def test_namespace_and_node_selector_filters() -> None:
    job = parse_job(jax_job("sel", workers=1, node_selector={"gpu": "h100"}, namespace="team-a"))
    labelled = node("b", cpu="8", memory="8Gi")
    labelled.labels["gpu"] = "h100"
    wrong_ns = cluster("wrong-ns", labelled, namespaces=["team-b"])
    unlabelled = cluster("unlabelled", node("c", cpu="8", memory="8Gi"))
    placement = plan_placement(
        job, [wrong_ns, unlabelled, cluster("right", labelled)], explain=True
    )
    assert placement.chosen == "right"
    reasons = {c.name: c.reason or "" for c in placement.full_decision().clusters}
    assert "namespace 'team-a' is not allowed" in reasons["wrong-ns"]
    assert "nodeSelector gpu=h100" in reasons["unlabelled"]


def test_taints_need_tolerations() -> None:
    doc = jax_job("tol", workers=1)
    tainted = node("t", cpu="8", memory="8Gi")
    tainted.taints.append(Taint(key="dedicated", value="ml", effect="NoSchedule"))
    assert plan_placement(parse_job(doc), [cluster("c", tainted)]).chosen is None
    doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    ]
    assert plan_placement(parse_job(doc), [cluster("c", tainted)]).chosen == "c"
    # Exists with an empty key tolerates every taint, as with the key left out.
    tainted.taints.append(Taint(key="gpu", effect="NoExecute"))
    for wildcard in ({"operator": "Exists"}, {"key": "", "operator": "Exists"}):
        doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = [wildcard]
        assert plan_placement(parse_job(doc), [cluster("c", tainted)]).chosen == "c", wildcard


def test_reservations_prevent_over_placement_until_the_heartbeat_shows_the_pods() -> None:
    only = cluster("only", node("a", cpu="4", memory="8Gi"))
    reservations = Reservations()
    placed = []
    for i in range(5):
        job = parse_job(jax_job(f"burst-{i}", workers=1, cpu="1"))
        placement = plan_placement(job, [only], reservations=reservations)
        if placement.chosen:
            reservations.reserve(placement.chosen, job.uid, placement.usage)
            placed.append(job.uid)
    assert len(placed) == 4
    heartbeat = cluster("only", node("a", {"cpu": "4"}, cpu="4", memory="8Gi"), jobs=placed)
    assert sorted(reservations.reconcile(heartbeat)) == sorted(placed)
    assert reservations.count("only") == 0
    late = parse_job(jax_job("late", workers=1, cpu="1"))
    assert plan_placement(late, [heartbeat], reservations=reservations).chosen is None


def test_jobs_of_one_shape_share_its_profile_and_no_other_shape_does() -> None:
    """A Placer keeps the first profile of each job shape for the later jobs of that shape;
    a job differing in anything placement reads (here its namespace) has its own."""
    placer = Placer()
    clusters = [
        cluster("team-b-only", node("b", cpu="8", memory="8Gi"), namespaces=["team-b"]),
        cluster("any", node("a", cpu="2", memory="2Gi")),
    ]
    first, second = (parse_job(jax_job(n, workers=2, cpu="1")) for n in ("one", "two"))
    other = parse_job(jax_job("three", workers=2, cpu="1", namespace="team-b"))
    assert placer.shape_key(first) is placer.shape_key(second)
    assert placer.shape_key(other) != placer.shape_key(first)
    for job in (first, second, other, first):
        planned = placer.plan(job, clusters)
        assert planned.decision == plan_placement(job, clusters).decision
    assert placer.plan(second, clusters).chosen == "any"
    assert placer.plan(other, clusters).chosen == "team-b-only"
