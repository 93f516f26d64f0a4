"""A SIGTERM stops the test run as Ctrl-C does, so that pytest tears the session fixtures down
and the Kafka broker and Kubernetes control planes they started stop with it. `timeout`, a CI
job's time limit and a closed terminal send SIGTERM; by default it ended the run on the spot
and left them running, orphaned."""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
