"""The `trainhub` command's entry point: a service stopped while it is still starting exits 0.

Importing the CLI takes a second or two. A SIGTERM in that time (a pod deleted or rolled as it
starts) killed `trainhub hub` or `trainhub worker` with 143 before they could install their
own handler, although they have nothing to undo yet and exit 0 when stopped a moment later.
Other commands keep the default (`up` says 143 for SIGTERM, as it does later)."""

from __future__ import annotations

import os
import signal
import sys

_SERVICES = frozenset({"hub", "worker"})


def _stop_while_starting(signum: int, frame: object) -> None:
    os._exit(0)  # nothing connected, nothing written: nothing to flush or undo


def main() -> None:
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    if command in _SERVICES:
        signal.signal(signal.SIGTERM, _stop_while_starting)
    from trainhub.cli import main as cli_main

    cli_main()
