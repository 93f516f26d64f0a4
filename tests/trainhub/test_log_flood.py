"""aiokafka's per-attempt connection errors are let through once per interval, with a count
of the ones left out; every other logger is untouched."""

from __future__ import annotations

import logging
import time

from trainhub.logs import OncePerInterval, RetriedByKafkaClient


def _record(name: str, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, message, None, None)


def test_repeated_aiokafka_errors_pass_once_per_interval_with_a_count() -> None:
    once = OncePerInterval(interval=0.2)
    down = "Unable connect to node with id 1: [Errno 111] Connect call failed"
    passed = [once.filter(_record("aiokafka", down)) for _ in range(500)]
    assert passed.count(True) == 1
    assert once.filter(_record("aiokafka.consumer.fetcher", "Failed fetch messages from 1"))
    assert all(once.filter(_record("dispatcher.hub", "same words")) for _ in range(5))
    time.sleep(0.25)
    later = _record("aiokafka", down)
    assert once.filter(later)
    assert later.getMessage() == f"{down} (and 499 times more in 0s)"


def test_errors_aiokafka_retries_itself_are_shown_at_debug_level_only() -> None:
    retried = RetriedByKafkaClient()
    root = logging.getLogger()
    level = root.level
    election = "Failed fetch offsets from 1: [Error 6] NotLeaderForPartitionError"
    try:
        root.setLevel(logging.WARNING)
        record = _record("aiokafka.consumer.fetcher", election)
        assert not retried.filter(record)
        coordinator = "Error in heartbeat: [Error 15] GroupCoordinatorNotAvailableError"
        assert not retried.filter(_record("aiokafka.consumer.group_coordinator", coordinator))
        # A real failure, and anyone else's words, still show.
        assert retried.filter(_record("aiokafka", "Unable connect to node with id 1"))
        assert retried.filter(_record("dispatcher.hub", election))
        root.setLevel(logging.DEBUG)
        shown = _record("aiokafka.consumer.fetcher", election)
        assert retried.filter(shown) and shown.levelname == "DEBUG"
    finally:
        root.setLevel(level)
