"""Running the `trainhub` command as a user does: a new Python process, its output captured."""

from __future__ import annotations

import subprocess
import sys


def run_trainhub(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m trainhub ARGS` (with `env` instead of this process's environment, when
    given); its exit code is the caller's to check."""
    return subprocess.run(
        [sys.executable, "-m", "trainhub", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        input=stdin,
    )
