"""The Kafka producer's partitioner keeps Kafka's default key -> partition mapping (other
producers, Java ones included, must put a job's events on the same partition)."""

from __future__ import annotations

import gc
import random
import tracemalloc

from aiokafka.partitioner import DefaultPartitioner

from bus.kafka import _KeyHashCache


def test_keys_land_where_the_default_partitioner_puts_them() -> None:
    rng = random.Random(3)
    cached, default = _KeyHashCache(keys=64), DefaultPartitioner()
    for count in (1, 3, 6, 12):
        partitions = list(range(count))
        keys = [rng.randbytes(rng.randint(1, 48)) for _ in range(300)]
        for key in keys + keys:  # the second round reads the cache (and overflows it)
            assert cached(key, partitions, partitions) == default(key, partitions, partitions)


def test_records_without_a_key_go_to_an_available_partition() -> None:
    cached = _KeyHashCache()
    assert {cached(None, [0, 1, 2], [2]) for _ in range(20)} == {2}
    assert {cached(None, [0, 1], []) for _ in range(50)} <= {0, 1}


def test_the_key_cache_stops_growing_after_a_burst_of_jobs() -> None:
    """A key is a job's uid: the hashes of jobs long gone do not stay (#27)."""
    cached = _KeyHashCache()
    partitions = list(range(3))
    keys = [f"{i:08d}-0000-5000-8000-000000000000".encode() for i in range(80_000)]
    gc.collect()
    tracemalloc.start()
    try:
        for key in keys[:40_000]:  # full (its table at its largest), traced
            cached(key, partitions, partitions)
        after_burst = tracemalloc.get_traced_memory()[0]
        for key in keys[40_000:]:
            cached(key, partitions, partitions)
        grown = tracemalloc.get_traced_memory()[0] - after_burst
    finally:
        tracemalloc.stop()
    assert grown < 40 * 1024, f"{grown} B kept for 40,000 more keys"
