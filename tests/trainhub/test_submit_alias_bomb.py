"""`trainhub submit --no-validate` still refuses a YAML alias bomb: at once, in little memory,
and before it reaches the broker."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from tests.schemas.test_bounded_yaml import billion_laughs

ROOT = Path(__file__).parents[2]


def test_submit_no_validate_refuses_a_billion_laughs(tmp_path: Path) -> None:
    job = tmp_path / "laughs.yaml"
    job.write_text(
        billion_laughs()
        + "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: laughs}\n"
        + "spec: {pytorchReplicaSpecs: {Master: {replicas: 1, template: {spec: *a8}}}}\n"
    )
    # Nothing listens on port 1: were the documents read, sending them would fail otherwise.
    command = [sys.executable, "-m", "trainhub", "submit", "--no-validate", str(job)]
    command += ["--bootstrap", "127.0.0.1:1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    took = time.monotonic() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert f"{job}: not valid YAML or JSON: aliases expand to more than 1000000" in said
    assert took < 10.0  # the interpreter and its imports included (the load alone: < 1 s)
    assert peak_kib < 300 * 1024, peak_kib
