"""`trainhub hub` and `trainhub worker` as they start: /metrics answers only once connected (and
the hub's state rebuilt), since the chart's readiness probe and the absent-metrics alert read an
answer as working; a SIGTERM before then is a clean stop (exit 0), as later."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.kafka.processes import Process


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
    # as it starts) is a clean stop too, not a kill.
    process = Process(command[0], [*command, "--bootstrap", "127.0.0.1:1"], tmp_path)
    time.sleep(0.4)
    assert process.terminate() == 0, process.log()[-2000:]
