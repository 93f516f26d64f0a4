"""Gangs of several replica types that greedy packing cannot place but kube-scheduler can:
placement must find the packing (or wait), never reject them as impossible."""

from __future__ import annotations

from typing import Any

import yaml

from dispatcher.demand import job_demand
from dispatcher.gang_fit import NodeRoom, gang_fit, search_fit
from dispatcher.placement import Placer, VersionedReservations, plan_placement
from schemas.job_parsing import parse_job
from tests.helpers import cluster, node


def _replica(count: int, cpu: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "tensorflow", "image": "img", "resources": {"requests": {"cpu": cpu}}}
    return {"replicas": count, "template": {"spec": {"containers": [container], **spec}}}


def _tfjob(name: str, **replicas: dict[str, Any]) -> Any:
    return parse_job(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {"name": name},
            "spec": {
                "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
                "tfReplicaSpecs": replicas,
            },
        }
    )


def _per_node(usage: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {name: float(amounts["cpu"]) for name, amounts in usage.items()}


def test_two_types_that_greedy_packing_strands_still_fit() -> None:
    # 2 x 3 cpu and 4 x 2 cpu on two 7-cpu nodes: 3+2+2 each. Largest first onto the
    # tightest node puts 3+3 on one node and strands a 2-cpu pod.
    job = _tfjob("tf", PS=_replica(2, "3"), Worker=_replica(4, "2"))
    nodes = cluster("two7", node("n0", cpu="7", memory="16Gi"), node("n1", cpu="7", memory="16Gi"))
    fit = gang_fit([NodeRoom.of(n) for n in nodes.nodes], job_demand(job))
    assert fit.fits and _per_node(fit.usage) == {"n0": 7.0, "n1": 7.0}
    placement = plan_placement(job, [nodes])
    assert placement.chosen == "two7" and not placement.never_fits
    assert _per_node(placement.usage) == {"n0": 7.0, "n1": 7.0}
    # The hub's cached path (board, reservations) finds it too.
    cached = Placer().plan(job, [nodes], reservations=VersionedReservations())
    assert cached.chosen == "two7" and _per_node(cached.usage) == {"n0": 7.0, "n1": 7.0}


def test_a_pinned_type_gets_its_node_back_from_a_free_one() -> None:
    # The Chief must go to the head node; greedy packing fills that node with the Worker.
    head = node("head0", cpu="3", memory="8Gi").model_copy(update={"labels": {"pool": "head"}})
    work = node("work0", cpu="5", memory="8Gi")
    job = _tfjob(
        "pinned", Chief=_replica(1, "2", nodeSelector={"pool": "head"}), Worker=_replica(1, "3")
    )
    placement = plan_placement(job, [cluster("c", head, work)])
    assert placement.chosen == "c", placement.decision
    assert _per_node(placement.usage) == {"head0": 2.0, "work0": 3.0}


def test_a_gang_that_cannot_fit_is_still_refused_for_good() -> None:
    job = _tfjob("big", PS=_replica(2, "4"), Worker=_replica(4, "2"))  # 16 cpu on 14
    nodes = cluster("two7", node("n0", cpu="7", memory="16Gi"), node("n1", cpu="7", memory="16Gi"))
    fit = gang_fit([NodeRoom.of(n) for n in nodes.nodes], job_demand(job))
    assert not fit.fits and fit.certain
    assert plan_placement(job, [nodes]).never_fits


def test_a_search_that_gives_up_says_so_and_the_job_waits() -> None:
    # 12 nodes of 6 cpu: a node takes one 4-cpu PS or two 3-cpu Workers, so 8 PS and 10
    # Workers need 13 nodes, though every count and sum fits. Proving that means trying
    # hundreds of packings: with a small budget the search gives up, and the cluster is
    # not called impossible (the job waits instead of being rejected).
    nodes = [node(f"n{i}", cpu="6", memory="64Gi") for i in range(12)]
    job = _tfjob("hard", PS=_replica(8, "4"), Worker=_replica(10, "3"))
    demands = job_demand(job)
    rooms = [NodeRoom.of(n) for n in nodes]

    def search(budget: int) -> tuple[object, bool]:
        return search_fit(
            lambda i: rooms[i].free,
            [r.name for r in rooms],
            ["pods" in r.free for r in rooms],
            demands,
            [list(range(len(rooms)))] * len(demands),
            budget=budget,
        )

    assert search(200) == (None, False)
    assert search(1_000_000) == (None, True)  # given time, it proves the gang cannot fit
    placement = plan_placement(job, [cluster("many", *nodes)])
    assert placement.chosen is None and not placement.never_fits


def test_the_example_from_the_plan_cli(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from trainhub.cli import app

    clusters = {
        "clusters": [
            {
                "name": "two7",
                "nodes": [
                    {"name": f"n{i}", "allocatable": {"cpu": "7", "memory": "16Gi", "pods": "110"}}
                    for i in range(2)
                ],
            }
        ]
    }
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump(clusters))
    job = _tfjob("tf", PS=_replica(2, "3"), Worker=_replica(4, "2")).to_document()
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    result = CliRunner().invoke(
        app, ["plan", str(tmp_path / "job.yaml"), "--clusters", str(tmp_path / "clusters.yaml")]
    )
    assert result.exit_code == 0, result.output
    assert "chosen: two7" in result.output
