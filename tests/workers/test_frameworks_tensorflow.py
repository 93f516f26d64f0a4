"""TFJob as the Training Operator v1.9 renders it: TF_CONFIG, master role, success, rules."""

from __future__ import annotations

import json
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
ADAPTER = adapter_for("TFJob")


def document(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DATA / name).read_text())
    return loaded


def env_of(pod: PodPlan, container: str = "tensorflow") -> dict[str, str | None]:
    found = next(c for c in pod.spec.containers if c.name == container)
    return {e.name: e.value for e in found.env or []}


def pods(doc: dict[str, Any], **kwargs: Any) -> dict[str, PodPlan]:
    return {p.name: p for p in render_job(parse_job(doc), **kwargs).pods}


def test_upstream_dist_mnist_tf_config() -> None:
    by_name = pods(document("tf-dist-mnist.yaml"))
    prefix = "dist-mnist-for-e2e-test"
    assert list(by_name) == [f"{prefix}-ps-0", f"{prefix}-ps-1"] + [
        f"{prefix}-worker-{i}" for i in range(4)
    ]
    cluster = (
        '{"ps":["dist-mnist-for-e2e-test-ps-0.default.svc:2222",'
        '"dist-mnist-for-e2e-test-ps-1.default.svc:2222"],'
        '"worker":["dist-mnist-for-e2e-test-worker-0.default.svc:2222",'
        '"dist-mnist-for-e2e-test-worker-1.default.svc:2222",'
        '"dist-mnist-for-e2e-test-worker-2.default.svc:2222",'
        '"dist-mnist-for-e2e-test-worker-3.default.svc:2222"]}'
    )
    assert env_of(by_name[f"{prefix}-worker-1"]) == {
        "TF_CONFIG": '{"cluster":' + cluster + ',"task":{"type":"worker","index":1},'
        '"environment":"cloud"}'
    }
    ps1 = json.loads(env_of(by_name[f"{prefix}-ps-1"])["TF_CONFIG"] or "")
    assert ps1["task"] == {"type": "ps", "index": 1}
    # No Chief: worker 0 carries the master role.
    roles = [n for n, p in by_name.items() if p.labels.get(LABEL_JOB_ROLE) == "master"]
    assert roles == [f"{prefix}-worker-0"]
    assert all(p.spec.restartPolicy == "Never" for p in by_name.values())
    assert all(p.spec.initContainers is None for p in by_name.values())


def test_chief_evaluator_and_sidecar() -> None:
    rendered = render_job(parse_job(document("tf-chief-evaluator.yaml")))
    by_name = {p.name: p for p in rendered.pods}
    assert list(by_name) == [
        "tf-estimator-chief-0",
        "tf-estimator-ps-0",
        "tf-estimator-worker-0",
        "tf-estimator-worker-1",
        "tf-estimator-evaluator-0",
    ]
    config = json.loads(env_of(by_name["tf-estimator-evaluator-0"])["TF_CONFIG"] or "")
    assert config == {
        "cluster": {
            "chief": ["tf-estimator-chief-0.ml.svc:2222"],
            "evaluator": ["tf-estimator-evaluator-0.ml.svc:2222"],
            "ps": ["tf-estimator-ps-0.ml.svc:2222"],
            "worker": ["tf-estimator-worker-0.ml.svc:3333", "tf-estimator-worker-1.ml.svc:3333"],
        },
        "task": {"type": "evaluator", "index": 0},
        "environment": "cloud",
    }
    assert list(config["cluster"]) == ["chief", "evaluator", "ps", "worker"]
    worker = by_name["tf-estimator-worker-1"]
    # TF_CONFIG goes into the tensorflow container only, and the port stays the user's.
    assert "TF_CONFIG" in env_of(worker)
    assert env_of(worker, "logger") == {}
    assert [(p.name, p.containerPort) for p in worker.spec.containers[0].ports or []] == [
        ("tfjob-port", 3333)
    ]
    assert worker.spec.containers[1].ports is None
    assert worker.spec.restartPolicy == "Never" and worker.restart_policy == "ExitCode"
    roles = [n for n, p in by_name.items() if p.labels.get(LABEL_JOB_ROLE) == "master"]
    assert roles == ["tf-estimator-chief-0"]
    assert {s.name: s.ports for s in rendered.services}["tf-estimator-worker-0"] == [
        ("tfjob-port", 3333)
    ]


def test_single_replica_gets_no_tf_config() -> None:
    doc = document("tf-dist-mnist.yaml")
    doc["spec"]["tfReplicaSpecs"] = {"Worker": doc["spec"]["tfReplicaSpecs"]["Worker"]}
    doc["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    (pod,) = pods(doc).values()
    assert env_of(pod) == {}
    assert pod.spec.containers[0].env is None


def test_legacy_master_is_the_chief() -> None:
    doc = document("tf-chief-evaluator.yaml")
    specs = doc["spec"]["tfReplicaSpecs"]
    specs["Master"] = specs.pop("Chief")
    by_name = pods(doc)
    assert by_name["tf-estimator-master-0"].labels[LABEL_JOB_ROLE] == "master"
    config = json.loads(env_of(by_name["tf-estimator-master-0"])["TF_CONFIG"] or "")
    assert config["task"] == {"type": "master", "index": 0}
    assert "master" in config["cluster"] and "chief" not in config["cluster"]


def test_dynamic_worker_uses_the_sparse_cluster_spec() -> None:
    doc = document("tf-dist-mnist.yaml")
    doc["spec"]["enableDynamicWorker"] = True
    by_name = pods(doc)
    worker2 = json.loads(env_of(by_name["dist-mnist-for-e2e-test-worker-2"])["TF_CONFIG"] or "")
    assert worker2 == {
        "cluster": {
            "worker": {"2": "dist-mnist-for-e2e-test-worker-2.default.svc:2222"},
            "ps": [
                "dist-mnist-for-e2e-test-ps-0.default.svc:2222",
                "dist-mnist-for-e2e-test-ps-1.default.svc:2222",
            ],
        },
        "task": {"type": "worker", "index": 2},
    }
    ps1 = json.loads(env_of(by_name["dist-mnist-for-e2e-test-ps-1"])["TF_CONFIG"] or "")
    assert ps1["cluster"] == {"worker": {}, "ps": ["dist-mnist-for-e2e-test-ps-1.default.svc:2222"]}


def test_loopback_hosts_get_their_own_ports() -> None:
    net = LoopbackNetwork()
    by_name = pods(document("tf-dist-mnist.yaml"), net=net)
    config = json.loads(env_of(by_name["dist-mnist-for-e2e-test-ps-0"])["TF_CONFIG"] or "")
    hosts = config["cluster"]["ps"] + config["cluster"]["worker"]
    assert all(h.startswith("127.0.0.1:") for h in hosts)
    assert len(set(hosts)) == 6
    assert hosts[0] == f"127.0.0.1:{net.ports[('dist-mnist-for-e2e-test-ps-0', 2222)]}"


def test_success_rules() -> None:
    chief = parse_job(document("tf-chief-evaluator.yaml"))
    running = {"PS": ReplicaCounts(1, active=1), "Worker": ReplicaCounts(2, active=2)}
    assert ADAPTER.succeeded(chief, {"Chief": ReplicaCounts(1, succeeded=1), **running})
    assert not ADAPTER.succeeded(chief, {"Chief": ReplicaCounts(1, active=1), **running})
    assert not ADAPTER.succeeded(
        chief,
        {
            "Chief": ReplicaCounts(1, active=1),
            "Worker": ReplicaCounts(2, succeeded=2, succeeded_indexes=frozenset({0, 1})),
        },
    )

    mnist = parse_job(document("tf-dist-mnist.yaml"))
    ps = {"PS": ReplicaCounts(2, active=2)}
    worker0 = ReplicaCounts(4, active=3, succeeded=1, succeeded_indexes=frozenset({0}))
    worker3 = ReplicaCounts(4, active=3, succeeded=1, succeeded_indexes=frozenset({3}))
    assert ADAPTER.succeeded(mnist, {**ps, "Worker": worker0})
    assert not ADAPTER.succeeded(mnist, {**ps, "Worker": worker3})
    assert ADAPTER.succeeded(mnist, {**ps, "Worker": ReplicaCounts(4, succeeded=4)})

    all_workers = document("tf-dist-mnist.yaml")
    all_workers["spec"]["successPolicy"] = "AllWorkers"
    job = parse_job(all_workers)
    assert not ADAPTER.succeeded(job, {**ps, "Worker": worker0})
    assert ADAPTER.succeeded(job, {**ps, "Worker": ReplicaCounts(4, succeeded=4)})

    ps_only = document("tf-dist-mnist.yaml")
    ps_only["spec"]["tfReplicaSpecs"].pop("Worker")
    assert not ADAPTER.succeeded(parse_job(ps_only), {"PS": ReplicaCounts(2, succeeded=2)})


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda s: s.update(Master=s["Chief"]),
            "spec.tfReplicaSpecs: at most one Chief or Master replica is allowed "
            "(got Chief replicas 1, Master replicas 1)",
        ),
        (
            lambda s: s["Chief"].update(replicas=2),
            "spec.tfReplicaSpecs: at most one Chief or Master replica is allowed "
            "(got Chief replicas 2)",
        ),
        (
            lambda s: s["Evaluator"]["template"]["spec"]["containers"][0].update(name="tf"),
            "spec.tfReplicaSpecs.Evaluator.template.spec.containers: must have at least one "
            "container named 'tensorflow' (got ['tf'])",
        ),
        (
            lambda s: s.update(Launcher=s["PS"]),
            "replica type 'Launcher' is not valid for TFJob; "
            "allowed: Chief, Master, PS, Worker, Evaluator",
        ),
        (
            lambda s: s["PS"]["template"]["spec"]["containers"][0].update(image=" "),
            "containers.0.image: container image must not be blank",
        ),
    ],
)
def test_validation_names_field_and_value(mutate: Any, expected: str) -> None:
    doc = document("tf-chief-evaluator.yaml")
    mutate(doc["spec"]["tfReplicaSpecs"])
    with pytest.raises(JobInvalid) as caught:
        parse_job(doc)
    assert expected in str(caught.value)


def test_evaluator_and_ps_keys_are_case_normalised() -> None:
    doc = document("tf-chief-evaluator.yaml")
    specs = doc["spec"]["tfReplicaSpecs"]
    doc["spec"]["tfReplicaSpecs"] = {
        "worker": specs["Worker"],
        "ps": specs["PS"],
        "evaluator": specs["Evaluator"],
        "chief": specs["Chief"],
    }
    assert list(parse_job(doc).replica_specs) == ["Chief", "PS", "Worker", "Evaluator"]
