"""Profiles a whole Python process with cProfile when TRAINHUB_CPROFILE names a folder: on
SIGUSR1 the stats since the previous one (or the start) are written there as
`<command>-<pid>-<n>.prof`, and profiling starts afresh. `bench.soak --profile DIR` puts
this folder first on its processes' PYTHONPATH, so each `trainhub` process it starts
imports this at start-up."""

from __future__ import annotations

import cProfile
import os
import signal
import sys
from pathlib import Path
from types import FrameType

_FOLDER = os.environ.get("TRAINHUB_CPROFILE")

if _FOLDER:
    _folder = Path(_FOLDER)
    _profilers = [cProfile.Profile()]

    def _dump(signum: int, frame: FrameType | None) -> None:
        profiler = _profilers[-1]
        profiler.disable()
        command = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].isalnum() else "python"
        path = _folder / f"{command}-{os.getpid()}-{len(_profilers)}.prof"
        profiler.dump_stats(str(path))
        _profilers.append(cProfile.Profile())
        _profilers[-1].enable()

    signal.signal(signal.SIGUSR1, _dump)
    _profilers[0].enable()
