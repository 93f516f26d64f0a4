"""The bench's CPU accounting: read from /proc, split per pod by role, extrapolated to a rate."""

from __future__ import annotations

import os
import time

from bench.machine_cpu import CpuSample, sample, split_per_item


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_sample_sees_this_process_spend_cpu_and_the_machine_with_it() -> None:
    groups = {"me": [os.getpid()]}
    before = sample(groups)
    _burn(0.3)
    after = sample(groups)
    spent = after.groups_s["me"] - before.groups_s["me"]
    assert 0.25 <= spent <= 1.0
    assert after.machine_busy_s - before.machine_busy_s >= 0.25


def test_a_process_that_is_gone_counts_nothing() -> None:
    assert sample({"gone": [2**22 + 12345]}).groups_s == {"gone": 0.0}


def test_the_split_is_per_pod_by_role_with_the_rest_and_the_cores_a_rate_needs() -> None:
    before = CpuSample(machine_busy_s=100.0, groups_s={"api": 10.0, "me": 5.0})
    after = CpuSample(machine_busy_s=104.0, groups_s={"api": 12.5, "me": 6.0})
    split = split_per_item(before, after, seconds=2.0, items=500, rate_target=300)
    assert split["busy_cores_mean"] == 2.0
    assert split["cpu_ms_per_pod"] == {
        "api": 5.0,
        "me": 2.0,
        "everything else on the machine": 1.0,
    }
    assert split["cpu_ms_per_pod_total"] == 8.0
    # 8 ms a pod at 300 pods/s: 2.4 cores.
    assert split["cores_needed_at_target"] == 2.4
    assert split_per_item(before, after, seconds=2.0, items=0, rate_target=300) == {}
