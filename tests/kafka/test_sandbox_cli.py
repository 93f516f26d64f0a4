"""`trainhub sandbox up/status/down` as a user runs them: processes outlive the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainhub", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sandbox_up_status_down(tmp_path: Path) -> None:
    env = {**os.environ, "TRAINHUB_SANDBOX_DIR": str(tmp_path / "sandbox")}
    up = _cli("up", "--clusters", "1", env=env)
    try:
        assert up.returncode == 0, up.stderr
        status = _cli("status", "-o", "json", env=env)
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        host, _, port = state["kafka"]["bootstrap"].rpartition(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert [c["name"] for c in state["clusters"]] == ["cluster-1"]
        assert Path(state["clusters"][0]["kubeconfig"]).exists()
        assert state["clusters"][0]["context"]
        pid = int(state["kafka"]["pid"])
        assert _alive(pid)
        again = _cli("up", env=env)
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        down = _cli("down", env=env)
    assert down.returncode == 0, down.stderr
    assert "kafka" in down.stdout and "member clusters" in down.stdout
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    assert _cli("status", env=env).returncode == 3
