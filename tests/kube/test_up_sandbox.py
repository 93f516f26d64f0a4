"""`trainhub up --sandbox`: the hub and one kube worker per sandbox member cluster in one
process, on the sandbox's broker, as its state file describes them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from bus.kafka_settings import KafkaSettings
from schemas.kubeflow import derive_job_uid
from tests.helpers import jax_job
from tests.kube.sandbox_access import job_objects
from trainhub_sandbox.kube_cluster import KubeSandbox

pytestmark = pytest.mark.kube
ROOT = Path(__file__).resolve().parents[2]


def _state(kube_sandbox: KubeSandbox, bootstrap: str) -> dict[str, object]:
    """What `trainhub sandbox up` writes: the broker and each cluster's identities."""
    return {
        "kafka": {"bootstrap": bootstrap, "pid": 0},
        "clusters": [
            {
                "name": c.name,
                "kubeconfig": str(c.admin_kubeconfig),
                "context": c.admin_context,
                "workerKubeconfig": str(c.worker_kubeconfig),
                "workerContext": c.worker_context,
                "namespaces": list(c.worker_namespaces),
            }
            for c in kube_sandbox.clusters.values()
        ],
    }


async def test_up_sandbox_runs_jobs_on_the_sandbox_clusters(
    kube_sandbox: KubeSandbox, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    (tmp_path / "sandbox.json").write_text(
        json.dumps(_state(kube_sandbox, kafka_settings.bootstrap))
    )
    name = f"up-sandbox-{uuid.uuid4().hex[:6]}"
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(jax_job(name, workers=2, cpu="100m", memory="64Mi")))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINHUB_SANDBOX_DIR": str(tmp_path)}
    env.pop("TRAINHUB_BOOTSTRAP", None)  # the sandbox's broker, from its state
    command = [sys.executable, "-m", "trainhub", "up", "--sandbox", "--no-live"]
    command += ["--exit-on-finish", "--topic-prefix", f"up-{name}", str(job)]
    done = await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True, timeout=180
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    names = ", ".join(kube_sandbox.clusters)
    assert f"hub + {len(kube_sandbox.clusters)} clusters ({names}), kube backend" in output
    assert f"Kafka at {kafka_settings.bootstrap}" in output
    assert "all jobs succeeded" in output, output
    chosen = re.search(rf"default/{name} Assigned on (\S+)", output)
    assert chosen is not None, output
    # The pods are real objects of the chosen cluster, bound to its KWOK nodes.
    pods = await job_objects(
        kube_sandbox.clusters[chosen.group(1)], "pods", derive_job_uid("default", name)
    )
    assert len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods), pods


def test_up_sandbox_without_clusters_says_how_to_start_them(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINHUB_SANDBOX_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "trainhub", "up", "--sandbox"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "trainhub sandbox up --clusters N" in done.stderr
