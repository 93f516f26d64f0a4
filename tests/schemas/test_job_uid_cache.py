"""A derived job uid is cached for the jobs in flight, not for every job ever seen (#27)."""

from __future__ import annotations

import gc
import tracemalloc

from schemas.job_meta import JOB_UID_CACHE, derive_job_uid


def test_the_uid_cache_stops_growing_after_a_burst_of_jobs() -> None:
    gc.collect()
    tracemalloc.start()
    try:
        # Full (its table at its largest), traced: what it lets go is then counted too.
        for i in range(2 * JOB_UID_CACHE):
            derive_job_uid("default", f"burst-{i}")
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(40_000):
            derive_job_uid("default", f"later-{i}")
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 40 * 1024, f"{grown} B kept for 40,000 more jobs"


def test_a_cached_uid_is_the_derived_one() -> None:
    first = derive_job_uid("team", "train")
    for i in range(100):
        derive_job_uid("team", f"other-{i}")
    assert derive_job_uid("team", "train") == first
    assert derive_job_uid("team", "train2") != first
