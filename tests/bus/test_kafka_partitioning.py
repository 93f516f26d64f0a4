"""The Kafka producer's partitioner keeps Kafka's default key -> partition mapping (other
producers, Java ones included, must put a job's events on the same partition)."""

from __future__ import annotations

import random

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
