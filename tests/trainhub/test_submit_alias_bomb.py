"""`trainhub submit --no-validate` still refuses a YAML alias bomb: at once, in little memory,
and before it reaches the broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.schemas.test_bounded_yaml import billion_laughs

ROOT = Path(__file__).parents[2]

_REPORTING_PEAK = """
import atexit, runpy, sys
def peak():
    with open("/proc/self/status") as status:
        print(next(line for line in status if line.startswith("VmHWM:")), flush=True)
atexit.register(peak)
sys.argv = sys.argv[1:]
runpy.run_module("trainhub", run_name="__main__", alter_sys=True)
"""


def test_submit_no_validate_refuses_a_billion_laughs(tmp_path: Path) -> None:
    job = tmp_path / "laughs.yaml"
    job.write_text(
        billion_laughs()
        + "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: laughs}\n"
        + "spec: {pytorchReplicaSpecs: {Master: {replicas: 1, template: {spec: *a8}}}}\n"
    )
    # Nothing listens on port 1: were the documents read, sending them would fail otherwise.
    args = ["trainhub", "submit", "--no-validate", str(job), "--bootstrap", "127.0.0.1:1"]
    # The child reports its own peak (VmHWM, since its exec): ru_maxrss would count the
    # pytest process it was forked from.
    command = [sys.executable, "-c", _REPORTING_PEAK, *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    started = time.monotonic()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as process:
        assert process.stdout is not None
        output = process.stdout.read()  # until it exits (its output is a few lines)
        process.wait()
    took = time.monotonic() - started
    peak_kib = int(output.rsplit("VmHWM:", 1)[1].split()[0])
    assert process.returncode == 1, output
    said = " ".join(output.split())
    assert f"{job}: not valid YAML or JSON: aliases expand to more than 1000000" in said
    assert took < 10.0  # the interpreter and its imports included (the load alone: < 1 s)
    assert peak_kib < 300 * 1024, peak_kib
