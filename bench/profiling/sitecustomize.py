"""Looks inside a whole Python process when asked by the environment:

- TRAINHUB_CPROFILE names a folder: the process runs under cProfile, and on SIGUSR1 the
  stats since the previous one (or the start) are written there as
  `<command>-<pid>-<n>.prof`, profiling starting afresh;
- TRAINHUB_OBJECT_COUNTS names a folder: on SIGUSR2, after a full collection, the live
  objects per type are written there as `<command>-<pid>-<n>.json` (the 200 most common),
  so that what grows from one batch to the next shows;
- TRAINHUB_MEMORY_PROBE names a folder: on SIGUSR2, after a full collection, one JSON line is
  appended to `<command>-<pid>.jsonl` with the RSS, the blocks Python's allocator holds
  (`sys.getallocatedblocks`), the bytes tracemalloc traces if it runs (`PYTHONTRACEMALLOC`),
  and the RSS after glibc's `malloc_trim(0)`: Python objects kept per job grow the blocks,
  memory the C allocator holds but does not use grows only the RSS before the trim.

`bench.soak --profile DIR` / `--object-counts DIR` put this folder first on their processes'
PYTHONPATH, so each `trainhub` process they start imports this at start-up."""

from __future__ import annotations

import cProfile
import ctypes
import gc
import json
import os
import signal
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from types import FrameType


def _command() -> str:
    return sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].isalnum() else "python"


_PROFILES = os.environ.get("TRAINHUB_CPROFILE")
_COUNTS = os.environ.get("TRAINHUB_OBJECT_COUNTS")
_PROBE = os.environ.get("TRAINHUB_MEMORY_PROBE")

if _PROFILES:
    _profile_folder = Path(_PROFILES)
    _profilers = [cProfile.Profile()]

    def _dump_profile(signum: int, frame: FrameType | None) -> None:
        profiler = _profilers[-1]
        profiler.disable()
        path = _profile_folder / f"{_command()}-{os.getpid()}-{len(_profilers)}.prof"
        profiler.dump_stats(str(path))
        _profilers.append(cProfile.Profile())
        _profilers[-1].enable()

    signal.signal(signal.SIGUSR1, _dump_profile)
    _profilers[0].enable()

if _COUNTS:
    _count_folder = Path(_COUNTS)
    _dumps = [0]

    def _dump_counts(signum: int, frame: FrameType | None) -> None:
        gc.collect()
        counts = Counter(type(o).__qualname__ for o in gc.get_objects())
        _dumps[0] += 1
        path = _count_folder / f"{_command()}-{os.getpid()}-{_dumps[0]}.json"
        path.write_text(json.dumps(dict(counts.most_common(200))))

    signal.signal(signal.SIGUSR2, _dump_counts)

if _PROBE:
    _probe_path = Path(_PROBE) / f"{_command()}-{os.getpid()}.jsonl"
    _page = os.sysconf("SC_PAGE_SIZE")
    _probes = [0]

    def _rss() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * _page

    def _probe(signum: int, frame: FrameType | None) -> None:
        gc.collect()
        _probes[0] += 1
        line: dict[str, object] = {
            "rss": _rss(),
            "allocated_blocks": sys.getallocatedblocks(),
            "objects": len(gc.get_objects()),
        }
        if tracemalloc.is_tracing():
            line["traced"] = tracemalloc.get_traced_memory()[0]
            snapshot = tracemalloc.take_snapshot()
            snapshot.dump(str(_probe_path.with_suffix(f".{_probes[0]}.snap")))
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        line["rss_after_trim"] = _rss()
        with _probe_path.open("a") as out:
            out.write(json.dumps(line) + "\n")

    signal.signal(signal.SIGUSR2, _probe)
