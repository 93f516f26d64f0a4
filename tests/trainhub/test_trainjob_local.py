"""TrainJobs on the `local` backend, their pods real processes: a torch-distributed TrainJob
trains across two nodes from the runtime's PET_* variables, a runtime's initializers run
before its trainer's nodes, and the JAX example runs as a TrainJob on the plain runtime."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.status import JobPhase
from schemas.trainer_runtimes import parse_runtime, runtime_catalog
from trainhub.embedded import Embedded, EmbeddedOptions
from workers.cluster_spec import parse_cluster_spec

ROOT = Path(__file__).resolve().parents[2]


def _options(tmp_path: Path) -> EmbeddedOptions:
    return EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=4,memory=8Gi")],
        backend="local",
        heartbeat_interval=0.2,
        logs_dir=tmp_path,
        workdir=ROOT,
    )


def _accuracy(log: str) -> float:
    return float(log.split("test_accuracy=")[1].split()[0])


async def test_a_torch_trainjob_trains_across_two_local_processes(tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "examples/trainjob-torch-digits/trainjob.yaml").read_text())
    async with Embedded(_options(tmp_path)) as system:
        uid = await system.submit(document)
        final = await system.wait_finished([uid], timeout=120)
        logs = await system.pod_logs(final[uid])
    assert final[uid].phase == JobPhase.SUCCEEDED, logs
    assert final[uid].reason == "AllJobsCompleted"
    master, other = logs["torch-digits-node-0-0"], logs["torch-digits-node-0-1"]
    # PET_MASTER_ADDR/PORT: node 0 on 127.0.0.1 at a port of this job's own (not 29500).
    address = master.split("master ")[1].split()[0]
    host, port = address.rsplit(":", 1)
    assert host == "127.0.0.1" and port != "29500"
    assert f"[node 1/2] master {address}" in other
    assert "1 peer(s) joined" in master and "reached the master" in other
    # One model trained by both: the same loss and accuracy on each node.
    assert _accuracy(master) == _accuracy(other) > 0.9
    assert master.split("step 200 ")[1].split()[0] == other.split("step 200 ")[1].split()[0]


def _initializer_runtime() -> dict[str, Any]:
    """A dataset initializer that writes `STORAGE_URI` after a while; the node, which depends
    on it Complete, reads it (and fails at once, restartPolicy Never, if it is not there)."""
    python = sys.executable
    write = (
        "import os, pathlib, time; time.sleep(1.5); "
        "pathlib.Path(os.environ['STORAGE_URI']).write_text('digits v1')"
    )
    read = "import os, pathlib; print('dataset:', pathlib.Path(os.environ['DATA']).read_text())"

    def job(name: str, command: list[str], depends: str | None = None) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": name,
            "template": {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": name, "image": "x", "command": command}],
                        }
                    }
                }
            },
        }
        ancestor = "trainer" if name == "node" else name
        entry["template"]["metadata"] = {
            "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}
        }
        if depends:
            entry["dependsOn"] = [{"name": depends, "status": "Complete"}]
        return entry

    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "with-dataset"},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        job("dataset-initializer", [python, "-c", write]),
                        job("node", [python, "-c", read], depends="dataset-initializer"),
                    ]
                }
            },
        },
    }


async def test_initializers_complete_before_the_trainers_nodes_start(tmp_path: Path) -> None:
    marker = tmp_path / "dataset.txt"
    runtime_catalog().add(parse_runtime(_initializer_runtime()))
    document = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "init-first"},
        "spec": {
            "managedBy": "trainhub.io/dispatcher",
            "runtimeRef": {"name": "with-dataset"},
            "initializer": {"dataset": {"storageUri": str(marker)}},
            "trainer": {"numNodes": 2, "env": [{"name": "DATA", "value": str(marker)}]},
        },
    }
    async with Embedded(_options(tmp_path / "logs")) as system:
        uid = await system.submit(document)
        final = await system.wait_finished([uid], timeout=60)
        logs = await system.pod_logs(final[uid])
    assert final[uid].phase == JobPhase.SUCCEEDED, (final[uid].message, logs)
    assert logs["init-first-node-0-0"].strip() == "dataset: digits v1"
    assert logs["init-first-node-0-1"].strip() == "dataset: digits v1"
    status = final[uid].status
    assert status is not None
    assert status.replicaStatuses["dataset-initializer"].succeeded == 1
    assert status.replicaStatuses["node"].succeeded == 2


@pytest.mark.slow
async def test_jax_example_trains_as_a_trainjob_on_the_plain_runtime(tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "examples/jax-mnist-spmd/trainjob.yaml").read_text())
    async with Embedded(_options(tmp_path)) as system:
        uid = await system.submit(document)
        final = await system.wait_finished([uid], timeout=240)
        logs = await system.pod_logs(final[uid])
    assert final[uid].phase == JobPhase.SUCCEEDED, logs
    assert sorted(logs) == ["jax-mnist-v2-node-0-0", "jax-mnist-v2-node-0-1"]
    for text in logs.values():
        # The coordinator on node 0, reached on 127.0.0.1 at the job's own port.
        assert "joining coordinator 127.0.0.1:" in text and "127.0.0.1:6666" not in text
        assert _accuracy(text) > 0.90


async def test_a_trainjob_the_cluster_cannot_create_has_created_false(tmp_path: Path) -> None:
    # The plain runtime's image has no command that `local` could run: refused for good.
    document = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "no-command"},
        "spec": {
            "managedBy": "trainhub.io/dispatcher",
            "runtimeRef": {"name": "plain-distributed"},
        },
    }
    async with Embedded(_options(tmp_path)) as system:
        uid = await system.submit(document)
        final = await system.wait_finished([uid], timeout=30)
    assert final[uid].phase == JobPhase.FAILED
    status = final[uid].status
    assert status is not None
    found = [(c.type, c.status, c.reason, c.message) for c in status.conditions]
    assert found[0] == ("Created", "False", "JobsCreationFailed", "Failed to create Jobs")
    failed = found[1]
    assert failed[:3] == ("Failed", "True", "FailedJobs")
    assert "has no command: the local backend" in (failed[3] or "")
