"""PyTorchJob as the Training Operator v1.9 renders it: env, init container, rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.errors import JobInvalid
from schemas.job_parsing import parse_job
from schemas.kubeflow import PyTorchJob
from workers.frameworks import adapter_for
from workers.frameworks.base import Endpoint, ReplicaCounts
from workers.network import LoopbackNetwork
from workers.rendering import LABEL_JOB_ROLE, PodPlan, render_job

DATA = Path(__file__).resolve().parents[1] / "data" / "kubeflow"
ADAPTER = adapter_for("PyTorchJob")


def document(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DATA / name).read_text())
    return loaded


def env_of(pod: PodPlan, container: str = "pytorch") -> dict[str, Any]:
    found = next(c for c in pod.spec.containers if c.name == container)
    return {e.name: e.value if e.valueFrom is None else e.valueFrom for e in found.env or []}


def pods(doc: dict[str, Any], **kwargs: Any) -> dict[str, PodPlan]:
    return {p.name: p for p in render_job(parse_job(doc), **kwargs).pods}


def test_upstream_simple_master_and_worker() -> None:
    rendered = render_job(parse_job(document("pytorch-simple.yaml")))
    by_name = {p.name: p for p in rendered.pods}
    assert list(by_name) == ["pytorch-simple-master-0", "pytorch-simple-worker-0"]
    master, worker = by_name.values()
    common = {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "MASTER_ADDR": "pytorch-simple-master-0",
        "PET_MASTER_ADDR": "pytorch-simple-master-0",
        "WORLD_SIZE": "2",
    }
    assert env_of(master) == common | {
        "RANK": "0",
        "PET_NODE_RANK": "0",
        "PET_NPROC_PER_NODE": "auto",
        "PET_NNODES": "2",
    }
    assert env_of(worker) == common | {
        "RANK": "1",
        "PET_NODE_RANK": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_NNODES": "2",
    }
    assert [e.name for e in worker.spec.containers[0].env or []][:4] == [
        "PYTHONUNBUFFERED",
        "MASTER_PORT",
        "PET_MASTER_PORT",
        "MASTER_ADDR",
    ]
    assert master.labels[LABEL_JOB_ROLE] == "master"
    assert LABEL_JOB_ROLE not in worker.labels
    assert master.spec.restartPolicy == worker.spec.restartPolicy == "OnFailure"
    for pod in (master, worker):
        assert [(p.name, p.containerPort) for p in pod.spec.containers[0].ports or []] == [
            ("pytorchjob-port", 23456)
        ]
    assert [(s.name, s.ports) for s in rendered.services] == [
        ("pytorch-simple-master-0", [("pytorchjob-port", 23456)]),
        ("pytorch-simple-worker-0", [("pytorchjob-port", 23456)]),
    ]


def test_workers_wait_for_the_master_name_with_an_init_container() -> None:
    by_name = pods(document("pytorch-simple.yaml"))
    master, worker = by_name["pytorch-simple-master-0"], by_name["pytorch-simple-worker-0"]
    assert master.spec.initContainers is None
    assert master.master_address is None
    (init,) = worker.spec.initContainers or []
    assert init.name == "init-pytorch"
    assert init.image == "alpine:3.10"
    assert init.command is not None and init.command[:2] == ["sh", "-c"]
    assert "nslookup pytorch-simple-master-0;" in init.command[2]
    assert "seq 100" in init.command[2]
    assert worker.master_address == ("pytorch-simple-master-0", 23456)
    assert ADAPTER.master_endpoint(parse_job(document("pytorch-simple.yaml"))) == Endpoint(
        "pytorch-simple-master-0", 23456
    )


def test_wait_for_master_switch_and_loopback_network() -> None:
    net = LoopbackNetwork()
    by_name = pods(document("pytorch-simple.yaml"), net=net, wait_for_master=False)
    worker = by_name["pytorch-simple-worker-0"]
    assert worker.spec.initContainers is None
    port = net.ports[("pytorch-simple-master-0", 23456)]
    assert worker.master_address == ("127.0.0.1", port)
    for pod in by_name.values():
        env = env_of(pod)
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "127.0.0.1"
        assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == str(port)


def test_nproc_per_node_custom_port_and_exit_code_policy() -> None:
    by_name = pods(document("pytorch-nproc.yaml"))
    assert list(by_name) == [
        "torchrun-ddp-master-0",
        "torchrun-ddp-worker-0",
        "torchrun-ddp-worker-1",
        "torchrun-ddp-worker-2",
    ]
    worker2 = by_name["torchrun-ddp-worker-2"]
    env = env_of(worker2)
    assert env["WORLD_SIZE"] == "16"
    assert env["MASTER_PORT"] == "29500"
    assert env["RANK"] == env["PET_NODE_RANK"] == "3"
    assert env["PET_NPROC_PER_NODE"] == "4"
    assert env["PET_NNODES"] == "4"
    # The user's own variable stays, after the injected ones.
    assert [e.name for e in worker2.spec.containers[0].env or []][-1] == "NCCL_DEBUG"
    assert worker2.spec.restartPolicy == "Never"
    assert worker2.restart_policy == "ExitCode"
    master = by_name["torchrun-ddp-master-0"]
    assert [(p.name, p.containerPort) for p in master.spec.containers[0].ports or []] == [
        ("pytorchjob-port", 29500)
    ]
    (init,) = worker2.spec.initContainers or []
    assert "nslookup torchrun-ddp-master-0;" in " ".join(init.command or [])


@pytest.mark.parametrize(("nproc", "world"), [("gpu", "4"), ("cpu", "4"), ("+2", "8")])
def test_world_size_counts_non_integer_nproc_as_one(nproc: str, world: str) -> None:
    doc = document("pytorch-nproc.yaml")
    doc["spec"]["nprocPerNode"] = nproc
    env = env_of(pods(doc)["torchrun-ddp-worker-0"])
    assert env["WORLD_SIZE"] == world
    assert env["PET_NPROC_PER_NODE"] == nproc


def test_upstream_elastic_example() -> None:
    rendered = render_job(parse_job(document("pytorch-elastic.yaml")))
    worker0, worker1 = rendered.pods
    assert env_of(worker1) == {
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_RDZV_ENDPOINT": "elastic-example-imagenet-worker-0:23456",
        "PET_RDZV_BACKEND": "c10d",
        "PET_NNODES": "1:2",
        "PET_MAX_RESTARTS": "100",
        "LOGLEVEL": "DEBUG",
    }
    # No Master: no MASTER_* / WORLD_SIZE / RANK, no init container, worker 0 is the master.
    assert worker0.labels[LABEL_JOB_ROLE] == "master"
    assert LABEL_JOB_ROLE not in worker1.labels
    assert worker1.spec.initContainers is None and worker1.master_address is None


def test_elastic_rendezvous_settings() -> None:
    doc = document("pytorch-elastic.yaml")
    doc["spec"]["elasticPolicy"] = {
        "rdzvBackend": "etcd-v2",
        "rdzvHost": "etcd.infra",
        "rdzvPort": 2379,
        "rdzvId": "run-7",
        "rdzvConf": [{"key": "timeout", "value": "900"}, {"key": "read_timeout", "value": "60"}],
        "standalone": True,
        "maxReplicas": 4,
    }
    env = env_of(pods(doc)["elastic-example-imagenet-worker-0"])
    assert env["PET_RDZV_ENDPOINT"] == "etcd.infra:2379"
    assert env["PET_RDZV_BACKEND"] == "etcd-v2"
    assert env["PET_NNODES"] == "4:4"
    assert env["PET_RDZV_ID"] == "run-7"
    assert env["PET_RDZV_CONF"] == "timeout=900,read_timeout=60"
    assert env["PET_STANDALONE"] == ""
    assert "PET_MAX_RESTARTS" not in env


def test_elastic_bounds_default_to_the_workers_and_port_to_worker_port() -> None:
    doc = document("pytorch-elastic.yaml")
    doc["spec"]["elasticPolicy"] = {"rdzvPort": 29400}
    env = env_of(pods(doc)["elastic-example-imagenet-worker-1"])
    assert env["PET_NNODES"] == "2:2"
    assert env["PET_RDZV_ENDPOINT"] == "elastic-example-imagenet-worker-0:29400"
    doc["spec"]["elasticPolicy"] = {"minReplicas": 1}
    assert env_of(pods(doc)["elastic-example-imagenet-worker-1"])["PET_NNODES"] == "1:1"


def test_elastic_rendezvous_port_is_remapped_on_loopback() -> None:
    net = LoopbackNetwork()
    rendered = pods(document("pytorch-elastic.yaml"), net=net)
    env = env_of(rendered["elastic-example-imagenet-worker-1"])
    port = net.ports[("elastic-example-imagenet-worker-0", 23456)]
    assert env["PET_RDZV_ENDPOINT"] == f"127.0.0.1:{port}"


def test_deprecated_elastic_nproc_per_node() -> None:
    doc = document("pytorch-elastic.yaml")
    doc["spec"]["elasticPolicy"]["nProcPerNode"] = 2
    job = parse_job(doc)
    assert isinstance(job, PyTorchJob)
    assert job.spec.nprocPerNode is None  # no "auto" default beside the deprecated field
    assert job.warnings() == [
        "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"
    ]
    assert env_of(render_job(job).pods[0])["PET_NPROC_PER_NODE"] == "2"
    doc["spec"]["nprocPerNode"] = "2"
    with pytest.raises(JobInvalid) as caught:
        parse_job(doc)
    assert "spec.elasticPolicy.nProcPerNode: must not be used with spec.nprocPerNode" in str(
        caught.value
    )


def test_nproc_per_node_defaults_to_auto() -> None:
    job = parse_job(document("pytorch-simple.yaml"))
    assert isinstance(job, PyTorchJob)
    assert job.spec.nprocPerNode == "auto"
    assert job.warnings() == []
    assert job.to_document()["spec"]["nprocPerNode"] == "auto"
    assert parse_job(job.to_document()) == job


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2),
            "spec.pytorchReplicaSpecs.Master.replicas: must be 1 (got 2)",
        ),
        (
            lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=0),
            "spec.pytorchReplicaSpecs.Worker.replicas: must be at least 1 (got 0)",
        ),
        (
            lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][
                0
            ].update(name="trainer"),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers: must have at least one "
            "container named 'pytorch' (got ['trainer'])",
        ),
        (
            lambda d: d["spec"].update(
                elasticPolicy={"minReplicas": 1},
                pytorchReplicaSpecs={"Master": d["spec"]["pytorchReplicaSpecs"]["Master"]},
            ),
            "spec.pytorchReplicaSpecs.Worker: must be configured if elastic policy is used",
        ),
        (
            lambda d: d["spec"]["pytorchReplicaSpecs"].update(
                Chief=d["spec"]["pytorchReplicaSpecs"]["Worker"]
            ),
            "replica type 'Chief' is not valid for PyTorchJob; allowed: Master, Worker",
        ),
        (lambda d: d["spec"].update(pytorchReplicaSpecs={}), "must configure at least one"),
        (lambda d: d["metadata"].update(name="1-bad"), "metadata.name: job name '1-bad'"),
    ],
)
def test_validation_names_field_and_value(mutate: Any, expected: str) -> None:
    doc = document("pytorch-simple.yaml")
    mutate(doc)
    with pytest.raises(JobInvalid) as caught:
        parse_job(doc)
    assert expected in str(caught.value)


def test_every_broken_rule_is_reported_at_once() -> None:
    doc = document("pytorch-simple.yaml")
    doc["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 3
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 0
    with pytest.raises(JobInvalid) as caught:
        parse_job(doc)
    message = str(caught.value)
    assert "Master.replicas: must be 1 (got 3)" in message
    assert "Worker.replicas: must be at least 1 (got 0)" in message


def test_lower_case_replica_types_are_accepted() -> None:
    doc = document("pytorch-simple.yaml")
    specs = doc["spec"]["pytorchReplicaSpecs"]
    doc["spec"]["pytorchReplicaSpecs"] = {"worker": specs["Worker"], "master": specs["Master"]}
    job = parse_job(doc)
    assert list(job.replica_specs) == ["Master", "Worker"]
    assert render_job(job).pods[0].name == "pytorch-simple-master-0"


def test_success_rules() -> None:
    simple = parse_job(document("pytorch-simple.yaml"))
    assert ADAPTER.succeeded(
        simple, {"Master": ReplicaCounts(1, succeeded=1), "Worker": ReplicaCounts(1, active=1)}
    )
    assert not ADAPTER.succeeded(
        simple, {"Master": ReplicaCounts(1, active=1), "Worker": ReplicaCounts(1, succeeded=1)}
    )
    workers_only = document("pytorch-simple.yaml")
    workers_only["spec"]["pytorchReplicaSpecs"].pop("Master")
    workers_only["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    job = parse_job(workers_only)
    assert not ADAPTER.succeeded(job, {"Worker": ReplicaCounts(2, active=1, succeeded=1)})
    assert ADAPTER.succeeded(job, {"Worker": ReplicaCounts(2, succeeded=2)})
    elastic = parse_job(document("pytorch-elastic.yaml"))
    assert ADAPTER.succeeded(elastic, {"Worker": ReplicaCounts(2, active=1, succeeded=1)})
    assert not ADAPTER.succeeded(elastic, {"Worker": ReplicaCounts(2, active=2)})
