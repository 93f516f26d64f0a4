"""`trainhub up` as a process: how it stops and what it prints of the pods' output."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

from tests.helpers import jax_job

ROOT = Path(__file__).resolve().parents[2]


def _job_file(tmp_path: Path, name: str, code: str, *args: str) -> Path:
    document = jax_job(name, workers=1, cpu="100m", memory="64Mi")
    container = document["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["command"] = [sys.executable, "-c", code, *args]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _up(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainhub", "up", "--no-live", "--backend", "local", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def test_sigterm_stops_up_like_ctrl_c_and_its_local_pods_with_it(tmp_path: Path) -> None:
    marker = f"sleeper-{uuid.uuid4().hex}"
    job = _job_file(tmp_path, "sleeper", "import time; time.sleep(120)", marker)
    _stop_and_leave_nothing(_up(tmp_path, str(job)), marker, processes=1, pause=None)


def test_pod_output_is_printed_as_written_brackets_and_all(tmp_path: Path) -> None:
    job = _job_file(tmp_path, "brackets", "print('[process 0/2] closing [/foo] tag [bold]x')")
    up = _up(tmp_path, "--exit-on-finish", str(job))
    output, _ = up.communicate(timeout=120)
    assert up.returncode == 0, output
    assert "[process 0/2] closing [/foo] tag [bold]x" in output, output
    assert "all jobs succeeded" in output


def test_a_second_sigterm_does_not_cut_the_stop_short_and_no_pod_process_outlives_up(
    tmp_path: Path,
) -> None:
    """`timeout` signals the process and then its group: a second SIGTERM while the first's
    stop is under way. Each pod takes a second to stop and leaves a process of its own
    running: every one of them must end with `up`."""
    marker = f"grandchild-{uuid.uuid4().hex}"
    slow_to_stop = (
        "import signal, subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]]); "
        "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1), sys.exit(0))); "
        "time.sleep(120)"
    )
    job = _job_file(tmp_path, "parent", slow_to_stop, marker)
    document = yaml.safe_load(job.read_text())
    document["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] = 2
    job.write_text(yaml.safe_dump(document))
    # Two pods, each with a process of its own; the second SIGTERM while they stop.
    _stop_and_leave_nothing(_up(tmp_path, str(job)), marker, processes=4, pause=0.5)


def _stop_and_leave_nothing(
    up: subprocess.Popen[str], marker: str, *, processes: int, pause: float | None
) -> None:
    """Once `processes` carry `marker`, SIGTERM `up` (again after `pause`, if given): it exits
    143 without a traceback, and no process carrying `marker` is left."""
    try:
        deadline = time.monotonic() + 60
        while len(_processes_with(marker)) < processes:
            assert up.poll() is None and time.monotonic() < deadline, "the pods never started"
            time.sleep(0.2)
        up.send_signal(signal.SIGTERM)
        if pause is not None:
            time.sleep(pause)
            up.send_signal(signal.SIGTERM)
        output, _ = up.communicate(timeout=30)
        assert up.returncode == 128 + signal.SIGTERM, output
        assert "Traceback" not in output, output
        deadline = time.monotonic() + 10
        while _processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_with(marker) == [], "a pod's process outlived trainhub up"
    finally:
        up.kill()
        for pid in _processes_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_metrics_port_0_prints_the_port_the_system_gave(tmp_path: Path) -> None:
    job = _job_file(tmp_path, "brief", "pass")
    up = _up(tmp_path, "--metrics-port", "0", "--exit-on-finish", str(job))
    output, _ = up.communicate(timeout=120)
    assert up.returncode == 0, output
    found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", output)
    assert found is not None and int(found.group(1)) > 0, output
