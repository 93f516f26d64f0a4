"""PaddleJob as the Training Operator v1.9 renders it: collective and PS modes, rules."""

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
ADAPTER = adapter_for("PaddleJob")
POD_IP = {"fieldRef": {"fieldPath": "status.podIP"}}


def document(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DATA / name).read_text())
    return loaded


def env_of(pod: PodPlan) -> list[tuple[str, Any]]:
    return [
        (e.name, e.value if e.valueFrom is None else e.valueFrom)
        for e in pod.spec.containers[0].env or []
    ]


def test_upstream_collective_example() -> None:
    rendered = render_job(parse_job(document("paddle-collective.yaml")))
    worker0, worker1 = rendered.pods
    head = [
        ("PYTHONUNBUFFERED", "1"),
        ("PADDLE_JOB_ID", "paddle-simple-cpu"),
        ("PADDLE_NNODES", "2"),
    ]
    # Worker 0 leads on its own pod IP (downward API, expanded by Kubernetes).
    assert env_of(worker0) == [
        *head,
        ("POD_IP_DUMMY", POD_IP),
        ("PADDLE_MASTER", "$(POD_IP_DUMMY):37777"),
    ]
    assert env_of(worker1) == [*head, ("PADDLE_MASTER", "paddle-simple-cpu-worker-0:37777")]
    # The master role is the Master replica's: collective mode has none.
    assert all(LABEL_JOB_ROLE not in p.labels for p in rendered.pods)
    assert all(p.spec.restartPolicy == "OnFailure" for p in rendered.pods)
    assert [(p.name, p.containerPort) for p in worker1.spec.containers[0].ports or []] == [
        ("master", 37777)
    ]
    assert [s.ports for s in rendered.services] == [[("master", 37777)]] * 2


def test_parameter_server_mode() -> None:
    rendered = render_job(parse_job(document("paddle-ps.yaml")))
    by_name = {p.name: p for p in rendered.pods}
    assert list(by_name) == ["paddle-ps-master-0", "paddle-ps-worker-0", "paddle-ps-worker-1"]
    head = [("PYTHONUNBUFFERED", "1"), ("PADDLE_JOB_ID", "paddle-ps"), ("PADDLE_NNODES", "3")]
    assert env_of(by_name["paddle-ps-master-0"]) == [
        *head,
        ("POD_IP_DUMMY", POD_IP),
        ("PADDLE_MASTER", "$(POD_IP_DUMMY):36543"),
        ("PADDLE_SERVER_NUM", "1"),
    ]
    assert env_of(by_name["paddle-ps-worker-0"]) == [
        *head,
        ("PADDLE_MASTER", "paddle-ps-master-0:36543"),
        ("PADDLE_TRAINER_NUM", "1"),
    ]
    master = by_name["paddle-ps-master-0"]
    assert master.labels[LABEL_JOB_ROLE] == "master"
    assert LABEL_JOB_ROLE not in by_name["paddle-ps-worker-1"].labels
    assert master.spec.restartPolicy == "Never"
    assert by_name["paddle-ps-worker-1"].spec.restartPolicy == "OnFailure"
    assert [(p.name, p.containerPort) for p in master.spec.containers[0].ports or []] == [
        ("master", 36543)
    ]
    assert all(p.spec.initContainers is None for p in rendered.pods)


def test_success_rules() -> None:
    ps = parse_job(document("paddle-ps.yaml"))
    assert ADAPTER.succeeded(
        ps, {"Master": ReplicaCounts(1, succeeded=1), "Worker": ReplicaCounts(2, active=2)}
    )
    assert not ADAPTER.succeeded(
        ps, {"Master": ReplicaCounts(1, active=1), "Worker": ReplicaCounts(2, succeeded=2)}
    )
    collective = parse_job(document("paddle-collective.yaml"))
    assert ADAPTER.succeeded(collective, {"Worker": ReplicaCounts(2, succeeded=2)})
    # No elastic shortcut for Paddle: one finished worker is not the job.
    assert not ADAPTER.succeeded(collective, {"Worker": ReplicaCounts(2, active=1, succeeded=1)})


def test_elastic_policy_is_typed() -> None:
    doc = document("paddle-collective.yaml")
    doc["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2, "maxRestarts": 3}
    assert parse_job(doc).to_document()["spec"]["elasticPolicy"]["maxRestarts"] == 3
    doc["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d"}
    with pytest.raises(JobInvalid, match=r"elasticPolicy\.rdzvBackend: Extra inputs"):
        parse_job(doc)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda s: s.update(PS=s["Worker"]),
            "replica type 'PS' is not valid for PaddleJob; allowed: Master, Worker",
        ),
        (
            lambda s: s["Worker"]["template"]["spec"]["containers"][0].update(name="pd"),
            "spec.paddleReplicaSpecs.Worker.template.spec.containers: must have at least one "
            "container named 'paddle' (got ['pd'])",
        ),
    ],
)
def test_validation_names_field_and_value(mutate: Any, expected: str) -> None:
    doc = document("paddle-ps.yaml")
    mutate(doc["spec"]["paddleReplicaSpecs"])
    with pytest.raises(JobInvalid) as caught:
        parse_job(doc)
    assert expected in str(caught.value)
