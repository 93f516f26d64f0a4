"""`trainhub hub` and `trainhub worker` as they start: /metrics answers only once connected (and
the hub's state rebuilt), since the chart's readiness probe and the absent-metrics alert read an
answer as working; a SIGTERM before then is a clean stop (exit 0), as later."""

from __future__ import annotations

import signal
import socket
import sys
import time
import types
from pathlib import Path

import pytest

from tests.kafka.processes import Process
from trainhub import entry


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.mark.parametrize(
    "command", [["hub"], ["worker", "--cluster", "east", "--backend", "sim"]], ids=["hub", "worker"]
)
def test_no_metrics_while_the_broker_cannot_be_reached(command: list[str], tmp_path: Path) -> None:
    port = _free_port()
    args = [*command, "--bootstrap", "127.0.0.1:1", "--metrics-port", str(port)]
    process = Process(command[0], args, tmp_path)
    try:
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            assert process.popen.poll() is None, process.log()[-2000:]
            assert not _answers(port), "metrics served before the process had connected"
            time.sleep(0.3)
    finally:
        process.terminate()


@pytest.mark.parametrize("command", [["hub"], ["worker", "--cluster", "east", "--backend", "sim"]])
def test_stopped_while_still_starting_a_service_exits_zero(
    command: list[str], tmp_path: Path
) -> None:
    # Within the first second the CLI is still being imported: a SIGTERM then (a pod deleted
    # as it starts) is a clean stop too, not a kill. Sent once the process catches SIGTERM,
    # not after a fixed pause: a busy machine can take longer than that to start Python
    # itself, before any of trainhub runs (as long as a kubelet's SIGTERM can come before).
    process = Process(command[0], [*command, "--bootstrap", "127.0.0.1:1"], tmp_path)
    deadline = time.monotonic() + 10
    while not _catches_sigterm(process.popen.pid) and time.monotonic() < deadline:
        assert process.popen.poll() is None, process.log()[-2000:]
        time.sleep(0.005)
    assert _catches_sigterm(process.popen.pid), "no SIGTERM handler after 10 s"
    assert process.terminate() == 0, process.log()[-2000:]


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (its SigCgt mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.parametrize(("command", "early"), [("hub", True), ("worker", True), ("up", False)])
def test_services_catch_sigterm_before_the_cli_is_imported(
    command: str, early: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler comes first: the CLI it guards takes a second or two to import."""
    seen: list[object] = []
    stand_in = types.ModuleType("trainhub.cli")
    stand_in.main = lambda: seen.append(signal.getsignal(signal.SIGTERM))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trainhub.cli", stand_in)
    monkeypatch.setattr(sys, "argv", ["trainhub", "-v", command])
    before = signal.getsignal(signal.SIGTERM)
    try:
        entry.main()
    finally:
        signal.signal(signal.SIGTERM, before)
    assert (seen[0] is entry._stop_while_starting) is early
