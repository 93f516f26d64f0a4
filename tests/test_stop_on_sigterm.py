"""A test run stopped by SIGTERM still tears its session fixtures down (stop_on_sigterm.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
import pytest
from pathlib import Path

pytest_plugins = ["tests.stop_on_sigterm"]


@pytest.fixture(scope="session")
def broker():
    yield
    (Path(__file__).parent / "stopped").write_text("torn down")
"""

TEST = """
import time
from pathlib import Path


def test_runs_long(broker):
    (Path(__file__).parent / "running").write_text("")
    time.sleep(60)
"""


def test_a_sigterm_tears_the_session_fixtures_down(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_long.py").write_text(TEST)
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "running").exists():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0]
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert (tmp_path / "stopped").read_text() == "torn down", output
    assert "stopped by signal 15" in output
