"""The sandbox's one way to start, watch and stop its processes (trainhub_sandbox.processes)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from trainhub_sandbox import processes
from trainhub_sandbox.processes import SandboxProcess

_SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"
_STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"
)


def _started(code: str, tmp_path: Path) -> SandboxProcess:
    process = processes.spawn("sleeper", [sys.executable, "-c", code], tmp_path / "p.log")
    deadline = time.monotonic() + 20
    while "ready" not in process.log.read_text():
        assert time.monotonic() < deadline, process.log.read_text()
        time.sleep(0.05)
    return process


def test_a_spawned_process_logs_runs_and_stops_on_sigterm(tmp_path: Path) -> None:
    process = _started(_SLEEPER, tmp_path)
    assert processes.is_running(process) and processes.is_running(process.pid)
    assert process.start_ticks == processes.start_ticks(process.pid)
    assert process.args[-1] == _SLEEPER
    processes.stop(process, grace=10)
    assert not processes.is_running(process)
    assert processes.exit_code(process) is None  # reaped and forgotten


def test_a_process_that_ignores_sigterm_is_killed_after_its_grace(tmp_path: Path) -> None:
    process = _started(_STUBBORN, tmp_path)
    started = time.monotonic()
    processes.stop(process, grace=0.5)
    assert not processes.is_running(process)
    assert time.monotonic() - started < 5


def test_a_recycled_pid_is_not_taken_for_the_process(tmp_path: Path) -> None:
    process = _started(_SLEEPER, tmp_path)
    try:
        assert process.start_ticks is not None
        other = replace(process, start_ticks=process.start_ticks + 1)
        assert not processes.is_running(other)
        processes.stop(other, grace=1)  # not ours any more: left alone
        assert processes.is_running(process)
    finally:
        processes.stop(process, grace=10)


def test_a_process_another_parent_started_is_stopped_by_pid(tmp_path: Path) -> None:
    """As `sandbox down` stops what `sandbox up` started: by PID, without its Popen."""
    popen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert processes.is_running(popen.pid)
        processes.stop(popen.pid, grace=10)
        assert not processes.is_running(popen.pid)  # a zombie until reaped: not running
    finally:
        popen.kill()
        assert popen.wait(10) == -signal.SIGTERM


def test_state_round_trip_and_free_ports(tmp_path: Path) -> None:
    process = SandboxProcess("etcd", 4242, 17, tmp_path / "etcd.log", ("etcd", "--name=x"))
    data = {"name": "etcd", "pid": 4242, "start_ticks": 17, "log": str(process.log)}
    assert SandboxProcess.from_state({**data, "args": ["etcd", "--name=x"]}) == process
    assert SandboxProcess.from_state(data).args == ()
    ports = processes.free_ports(3)
    assert len(set(ports)) == 3 and all(port > 0 for port in ports)
