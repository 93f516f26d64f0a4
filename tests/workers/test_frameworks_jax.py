"""JAXJob as the Training Operator v1.9 renders it: coordinator env, master role, rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.errors import JobInvalid
from schemas.job_parsing import parse_job
from workers.frameworks import adapter_for
from workers.frameworks.base import ReplicaCounts
from workers.network import LoopbackNetwork
from workers.rendering import LABEL_JOB_ROLE, PodPlan, render_job

DATA = Path(__file__).resolve().parents[1] / "data" / "kubeflow"
ADAPTER = adapter_for("JAXJob")


def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DATA / "jax-simple.yaml").read_text())
    return loaded


def env_of(pod: PodPlan) -> list[tuple[str, str | None]]:
    return [(e.name, e.value) for e in pod.spec.containers[0].env or []]


def test_upstream_simple_example() -> None:
    rendered = render_job(parse_job(document()))
    worker0, worker1 = rendered.pods
    assert env_of(worker1) == [
        ("PYTHONUNBUFFERED", "1"),
        ("COORDINATOR_PORT", "6666"),
        ("COORDINATOR_ADDRESS", "jaxjob-simple-worker-0"),
        ("NUM_PROCESSES", "2"),
        ("PROCESS_ID", "1"),
    ]
    assert dict(env_of(worker0))["PROCESS_ID"] == "0"
    assert worker0.labels[LABEL_JOB_ROLE] == "master"
    assert LABEL_JOB_ROLE not in worker1.labels
    assert worker0.spec.restartPolicy == "OnFailure"
    assert [(s.name, s.ports) for s in rendered.services] == [
        ("jaxjob-simple-worker-0", [("jaxjob-port", 6666)]),
        ("jaxjob-simple-worker-1", [("jaxjob-port", 6666)]),
    ]
    assert all(p.spec.initContainers is None for p in rendered.pods)


def test_custom_port_and_loopback() -> None:
    doc = document()
    container = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["ports"] = [{"name": "jaxjob-port", "containerPort": 1234}]
    assert dict(env_of(render_job(parse_job(doc)).pods[1]))["COORDINATOR_PORT"] == "1234"
    net = LoopbackNetwork()
    env = dict(env_of(render_job(parse_job(doc), net).pods[1]))
    assert env["COORDINATOR_ADDRESS"] == "127.0.0.1"
    assert env["COORDINATOR_PORT"] == str(net.ports[("jaxjob-simple-worker-0", 1234)])


def test_success_is_every_worker() -> None:
    job = parse_job(document())
    assert ADAPTER.succeeded(job, {"Worker": ReplicaCounts(2, succeeded=2)})
    assert not ADAPTER.succeeded(job, {"Worker": ReplicaCounts(2, active=1, succeeded=1)})


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda s: s.update(Master=s["Worker"]),
            "replica type 'Master' is not valid for JAXJob; allowed: Worker",
        ),
        (
            lambda s: s["Worker"]["template"]["spec"]["containers"][0].update(name="main"),
            "spec.jaxReplicaSpecs.Worker.template.spec.containers: must have at least one "
            "container named 'jax' (got ['main'])",
        ),
    ],
)
def test_validation_names_field_and_value(mutate: Any, expected: str) -> None:
    doc = document()
    mutate(doc["spec"]["jaxReplicaSpecs"])
    with pytest.raises(JobInvalid) as caught:
        parse_job(doc)
    assert expected in str(caught.value)
