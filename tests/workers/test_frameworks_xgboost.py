"""XGBoostJob as the Training Operator v1.9 renders it: env, master role, success, rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.errors import JobInvalid
from schemas.job_parsing import parse_job
from workers.frameworks import adapter_for
from workers.frameworks.base import ReplicaCounts
from workers.rendering import LABEL_JOB_ROLE, PodPlan, render_job

DATA = Path(__file__).resolve().parents[1] / "data" / "kubeflow"
ADAPTER = adapter_for("XGBoostJob")
JOB = "xgboost-dist-iris-test-train"


def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DATA / "xgboost-iris.yaml").read_text())
    return loaded


def env_of(pod: PodPlan) -> dict[str, str | None]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def test_upstream_iris_example() -> None:
    rendered = render_job(parse_job(document()))
    by_name = {p.name: p for p in rendered.pods}
    assert list(by_name) == [f"{JOB}-master-0", f"{JOB}-worker-0", f"{JOB}-worker-1"]
    common = {
        "MASTER_PORT": "9991",
        "MASTER_ADDR": f"{JOB}-master-0",
        "WORLD_SIZE": "3",
    }
    tail = {
        "PYTHONUNBUFFERED": "1",
        "WORKER_PORT": "9991",
        "WORKER_ADDRS": f"{JOB}-worker-0,{JOB}-worker-1",
    }
    assert env_of(by_name[f"{JOB}-master-0"]) == common | {"RANK": "0"} | tail
    assert env_of(by_name[f"{JOB}-worker-0"]) == common | {"RANK": "1"} | tail
    assert env_of(by_name[f"{JOB}-worker-1"]) == common | {"RANK": "2"} | tail
    assert list(env_of(by_name[f"{JOB}-worker-1"])) == [
        "MASTER_PORT",
        "MASTER_ADDR",
        "WORLD_SIZE",
        "RANK",
        "PYTHONUNBUFFERED",
        "WORKER_PORT",
        "WORKER_ADDRS",
    ]
    roles = [n for n, p in by_name.items() if p.labels.get(LABEL_JOB_ROLE) == "master"]
    assert roles == [f"{JOB}-master-0"]
    master, worker = by_name[f"{JOB}-master-0"], by_name[f"{JOB}-worker-0"]
    assert master.spec.restartPolicy == "Never" and master.restart_policy == "Never"
    assert worker.spec.restartPolicy == "Never" and worker.restart_policy == "ExitCode"
    # The user's xgboostjob-port is kept, not duplicated; no init container upstream.
    assert [(p.name, p.containerPort) for p in worker.spec.containers[0].ports or []] == [
        ("xgboostjob-port", 9991)
    ]
    assert all(p.spec.initContainers is None for p in rendered.pods)
    assert [s.ports for s in rendered.services] == [[("xgboostjob-port", 9991)]] * 3


def test_master_alone_gets_no_worker_variables() -> None:
    doc = document()
    doc["spec"]["xgbReplicaSpecs"].pop("Worker")
    (pod,) = render_job(parse_job(doc)).pods
    assert env_of(pod) == {
        "MASTER_PORT": "9991",
        "MASTER_ADDR": f"{JOB}-master-0",
        "WORLD_SIZE": "1",
        "RANK": "0",
        "PYTHONUNBUFFERED": "1",
    }


def test_default_port_is_added_when_absent() -> None:
    doc = document()
    for spec in doc["spec"]["xgbReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0].pop("ports")
    pod = render_job(parse_job(doc)).pods[1]
    assert env_of(pod)["MASTER_PORT"] == env_of(pod)["WORKER_PORT"] == "9999"
    assert [(p.name, p.containerPort) for p in pod.spec.containers[0].ports or []] == [
        ("xgboostjob-port", 9999)
    ]


def test_success_is_the_master() -> None:
    job = parse_job(document())
    assert ADAPTER.succeeded(
        job, {"Master": ReplicaCounts(1, succeeded=1), "Worker": ReplicaCounts(2, active=2)}
    )
    assert not ADAPTER.succeeded(
        job, {"Master": ReplicaCounts(1, active=1), "Worker": ReplicaCounts(2, succeeded=2)}
    )


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda s: s.pop("Master"),
            "spec.xgbReplicaSpecs.Master: must be present (got ['Worker'])",
        ),
        (
            lambda s: s["Master"].update(replicas=2),
            "spec.xgbReplicaSpecs.Master.replicas: must be 1 (got 2)",
        ),
        (
            lambda s: s["Worker"]["template"]["spec"]["containers"][0].update(name="xgb"),
            "spec.xgbReplicaSpecs.Worker.template.spec.containers: must have at least one "
            "container named 'xgboost' (got ['xgb'])",
        ),
        (
            lambda s: s.update(PS=s["Worker"]),
            "replica type 'PS' is not valid for XGBoostJob; allowed: Master, Worker",
        ),
    ],
)
def test_validation_names_field_and_value(mutate: Any, expected: str) -> None:
    doc = document()
    mutate(doc["spec"]["xgbReplicaSpecs"])
    with pytest.raises(JobInvalid) as caught:
        parse_job(doc)
    assert expected in str(caught.value)
