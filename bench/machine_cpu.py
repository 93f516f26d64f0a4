"""Where a bench run's CPU went: the machine's busy time and named groups of processes, read
from /proc (Linux), so that a rate can be set against what it cost and what the machine has."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal ...; idle, iowait and
# steal are time the machine's processes did not run.
_NOT_BUSY = (3, 4, 7)


@dataclass(frozen=True)
class CpuSample:
    machine_busy_s: float
    groups_s: dict[str, float]


def _process_cpu_s(pid: int) -> float:
    """utime + stime of one process (all its threads), 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def _machine_busy_s() -> float:
    try:
        line = Path("/proc/stat").read_text().splitlines()[0]
    except OSError:
        return 0.0
    ticks = [int(value) for value in line.split()[1:]]
    return sum(t for i, t in enumerate(ticks) if i not in _NOT_BUSY) / _TICKS_PER_S


def sample(groups: Mapping[str, Iterable[int]]) -> CpuSample:
    return CpuSample(
        machine_busy_s=_machine_busy_s(),
        groups_s={name: sum(_process_cpu_s(pid) for pid in pids) for name, pids in groups.items()},
    )


def split_per_item(
    before: CpuSample, after: CpuSample, seconds: float, items: int, rate_target: float
) -> dict[str, Any]:
    """The CPU between two samples per item (pod), by group and in all, and how many cores
    `rate_target` items per second would take at that cost."""
    if items <= 0 or seconds <= 0:
        return {}
    busy = after.machine_busy_s - before.machine_busy_s
    spent = {name: after.groups_s[name] - before.groups_s.get(name, 0.0) for name in after.groups_s}
    spent["everything else on the machine"] = max(0.0, busy - sum(spent.values()))
    per_item_ms = 1000 * busy / items
    return {
        "cores": os.cpu_count(),
        "busy_cores_mean": round(busy / seconds, 2),
        "cpu_ms_per_pod": {name: round(1000 * s / items, 2) for name, s in spent.items()},
        "cpu_ms_per_pod_total": round(per_item_ms, 2),
        "cores_needed_at_target": round(per_item_ms * rate_target / 1000, 2),
    }
