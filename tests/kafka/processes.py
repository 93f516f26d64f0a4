"""Start trainhub commands as real OS processes for the multi-process tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


class Process:
    def __init__(self, name: str, args: list[str], logs: Path) -> None:
        self.name = name
        self.log_path = logs / f"{name}.log"
        self._log = self.log_path.open("ab")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "trainhub", *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def terminate(self, timeout: float = 20) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._log.close()
        return self.popen.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def sim_worker(
    cluster: str,
    common: list[str],
    logs: Path,
    *,
    capacity: str = "cpu=8,memory=32Gi,nodes=2",
    heartbeat_interval: float = 0.5,
    verbose: bool = False,
) -> Process:
    """`trainhub worker --backend sim` for `cluster`, with the bus settings in `common`
    (`verbose`: its info lines too, to see how far a stop got)."""
    args = ["-v"] if verbose else []
    args += ["worker", *common, "--cluster", cluster, "--backend", "sim"]
    args += ["--capacity", capacity, "--heartbeat-interval", str(heartbeat_interval)]
    return Process(f"worker-{cluster}", args, logs)
