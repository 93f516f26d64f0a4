"""The local backend runs pods as real processes that find each other on 127.0.0.1."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from schemas.status import JobPhase
from tests.helpers import jax_job
from trainhub.embedded import Embedded, EmbeddedOptions
from workers.cluster_spec import parse_cluster_spec

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("rendezvous.py")


def _rendezvous_job(name: str, exit_with: int | None = None) -> dict[str, object]:
    doc = jax_job(name, workers=2, cpu="500m", memory="256Mi")
    container = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["command"] = [sys.executable, str(SCRIPT)]
    if exit_with is not None:
        container["command"] = [sys.executable, "-c", f"import sys; sys.exit({exit_with})"]
    return doc


def _options(tmp_path: Path) -> EmbeddedOptions:
    return EmbeddedOptions(
        clusters=[
            parse_cluster_spec("a:cpu=2,memory=4Gi"),
            parse_cluster_spec("b:cpu=2,memory=4Gi"),
        ],
        backend="local",
        heartbeat_interval=0.2,
        logs_dir=tmp_path,
        workdir=ROOT,
    )


async def test_two_process_jobs_meet_without_port_collisions(tmp_path: Path) -> None:
    async with Embedded(_options(tmp_path)) as system:
        # Two jobs with the same default port 6666, possibly on the same cluster.
        uids = [await system.submit(_rendezvous_job(n)) for n in ("meet-a", "meet-b")]
        final = await system.wait_finished(uids, timeout=60)
        assert {u.phase for u in final.values()} == {JobPhase.SUCCEEDED}
        ports = set()
        for update in final.values():
            logs = await system.pod_logs(update)
            coordinator = logs[f"{update.name}-worker-0"]
            assert "met ['rank-1']" in coordinator
            assert "reached the coordinator" in logs[f"{update.name}-worker-1"]
            ports.add(coordinator.split("port ")[1].split()[0])
        assert len(ports) == 2 and "6666" not in ports


async def test_exit_code_becomes_pod_and_job_failure(tmp_path: Path) -> None:
    async with Embedded(_options(tmp_path)) as system:
        uid = await system.submit(_rendezvous_job("exits", exit_with=5))
        final = await system.wait_finished([uid], timeout=60)
        assert final[uid].phase == JobPhase.FAILED
        assert "exited with code 5" in (final[uid].message or "")


async def test_a_job_without_a_command_fails_at_once_on_the_local_backend(tmp_path: Path) -> None:
    # Kubeflow's examples rely on the image's entrypoint; under OnFailure the pod used to be
    # restarted for ever (one "Restarting ... exited with code 127", then nothing).
    document = _rendezvous_job("entrypoint")
    spec = document["spec"]["jaxReplicaSpecs"]["Worker"]  # type: ignore[index]
    spec["restartPolicy"] = "OnFailure"
    del spec["template"]["spec"]["containers"][0]["command"]
    async with Embedded(_options(tmp_path)) as system:
        uid = await system.submit(document)
        final = await system.wait_finished([uid], timeout=20)
        assert final[uid].phase == JobPhase.FAILED
        assert "has no command: the local backend" in (final[uid].message or "")


@pytest.mark.slow
async def test_jax_example_trains_across_two_processes(tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "examples/jax-mnist-spmd/jaxjob.yaml").read_text())
    async with Embedded(_options(tmp_path)) as system:
        uid = await system.submit(document)
        final = await system.wait_finished([uid], timeout=240)
        logs = await system.pod_logs(final[uid])
        assert final[uid].phase == JobPhase.SUCCEEDED, logs
        for text in logs.values():
            accuracy = float(text.split("test_accuracy=")[1].split()[0])
            assert accuracy > 0.90
