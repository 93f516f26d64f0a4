"""TrainJob initializers on `local`, without the internet: upstream's torchtune runtime (its
initializer images, the `initializer` volume at /workspace) with trainhub's initializer
fetching a dataset the test serves over HTTP, a model from a claim and from local paths, and
an hf:// source that cannot be reached failing the job at once, naming the URI."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import yaml

from schemas.events import EventType
from schemas.status import JobPhase
from schemas.trainer_runtimes import parse_runtime, runtime_catalog
from tests.served_files import closed_port_url, serve_files
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.producer import request
from trainhub.settings import TrainhubSettings
from workers.cluster_spec import parse_cluster_spec

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_RUNTIME = ROOT / "schemas" / "runtimes" / "torchtune_llama3_2_1b.yaml"
READ = (
    "import pathlib, sys\n"
    "data, model = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2].split('=', 1)[1])\n"
    "print('rows:', data.read_text().strip().replace(chr(10), '|'))\n"
    "print('model:', sorted(p.name for p in model.iterdir()))\n"
)


def _runtime() -> None:
    """Upstream's runtime as shipped, but for restartPolicy Never (a failed fetch fails the
    job at once rather than after six restarts)."""
    runtime: dict[str, Any] = yaml.safe_load(UPSTREAM_RUNTIME.read_text())
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        job["template"]["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    runtime_catalog().add(parse_runtime(runtime))


def _trainjob(name: str, dataset: str, model: str, **dataset_env: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "managedBy": "trainhub.io/dispatcher",
            "runtimeRef": {"name": "torchtune-llama3.2-1b"},
            "initializer": {
                "dataset": {
                    "storageUri": dataset,
                    "env": [{"name": k, "value": v} for k, v in dataset_env.items()],
                },
                "model": {"storageUri": model},
            },
            "trainer": {
                # The paths as a trainer in the container sees them: /workspace is the
                # initializer volume's mount.
                "command": [sys.executable, "-c", READ],
                "args": ["/workspace/dataset/digits.csv", "checkpointer.dir=/workspace/model"],
                "resourcesPerNode": {"requests": {"cpu": "1", "memory": "1Gi"}},
            },
        },
    }


def _options(tmp_path: Path, pvc_dir: Path | None = None) -> EmbeddedOptions:
    return EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=4,memory=8Gi")],
        backend="local",
        heartbeat_interval=0.2,
        logs_dir=tmp_path / "logs",
        workdir=ROOT,
        settings=TrainhubSettings(local_pvc_dir=None if pvc_dir is None else str(pvc_dir)),
    )


async def test_a_served_dataset_and_a_claims_model_reach_the_trainer(tmp_path: Path) -> None:
    _runtime()
    claim = tmp_path / "pvc" / "models" / "llama"
    claim.mkdir(parents=True)
    (claim / "config.json").write_text("{}")
    (claim / "model.safetensors").write_bytes(b"w")
    with serve_files({"/sets/digits.csv": b"1,0\n0,1\n"}) as served:
        async with Embedded(_options(tmp_path, tmp_path / "pvc")) as system:
            uid = await system.submit(
                _trainjob("fetched", f"{served.url}/sets/digits.csv", "pvc://models/llama")
            )
            final = await system.wait_finished([uid], timeout=90)
            logs = await system.pod_logs(final[uid])
            assert final[uid].phase == JobPhase.SUCCEEDED, (final[uid].message, logs)
            # The job's workspace, where the initializer volume is on local, holds what was
            # fetched after the job ended...
            workspace = tmp_path / "logs" / "solo" / "workspaces" / "default" / "fetched"
            assert (workspace / "dataset" / "digits.csv").read_text() == "1,0\n0,1\n"
            assert (workspace / "model" / "config.json").exists()
            # ... and goes when the job is deleted; the claim it read stays.
            await request(system.bus, system.topics, EventType.JOB_DELETED, uid)
            for _ in range(100):
                if not workspace.exists():
                    break
                await asyncio.sleep(0.05)
            assert not workspace.exists()
            assert (claim / "model.safetensors").exists()
    assert served.requests == [("/sets/digits.csv", None)]
    assert logs["fetched-node-0-0"].splitlines() == [
        "rows: 1,0|0,1",
        "model: ['config.json', 'model.safetensors']",
    ]
    assert "has been downloaded" in logs["fetched-dataset-initializer-0-0"]


async def test_local_paths_are_copied_into_the_workspace(tmp_path: Path) -> None:
    _runtime()
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "digits.csv").write_text("7,7\n")
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "tokenizer.model").write_text("t")
    async with Embedded(_options(tmp_path)) as system:
        document = _trainjob("copied", (tmp_path / "sets").as_uri(), str(tmp_path / "weights"))
        uid = await system.submit(document)
        final = await system.wait_finished([uid], timeout=90)
        logs = await system.pod_logs(final[uid])
    assert final[uid].phase == JobPhase.SUCCEEDED, (final[uid].message, logs)
    assert logs["copied-node-0-0"].splitlines() == ["rows: 7,7", "model: ['tokenizer.model']"]


async def test_hf_without_the_internet_fails_the_job_naming_the_uri(tmp_path: Path) -> None:
    _runtime()
    async with Embedded(_options(tmp_path)) as system:
        # The Hub where nothing answers: what a machine without the internet meets.
        document = _trainjob(
            "offline", "hf://tatsu-lab/alpaca", str(tmp_path), HF_ENDPOINT=closed_port_url()
        )
        uid = await system.submit(document)
        final = await system.wait_finished([uid], timeout=60)
        logs = await system.pod_logs(final[uid])
    assert final[uid].phase == JobPhase.FAILED
    assert final[uid].reason == "FailedJobs"
    message = final[uid].message or ""
    assert "offline-dataset-initializer-0-0 exited with code 1" in message
    assert "cannot fetch hf://tatsu-lab/alpaca (http://127.0.0.1:" in message
    assert "after 3 tries" in message
    # Nothing after it started.
    assert logs["offline-model-initializer-0-0"] == logs["offline-node-0-0"] == ""
