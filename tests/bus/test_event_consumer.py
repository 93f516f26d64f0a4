"""An event consumer with `concurrency`: different keys' records are handled at once, each
key's in order, and offsets are committed only once every effect below them is durable."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

import pytest

from bus.base import Record, TopicPartition, TopicSpec
from bus.events import EventConsumer, EventHandler, publish_event
from bus.memory import MemoryBus, partition_for
from schemas.events import CloudEvent, EventType, JobRef, make_event

TOPIC = "t"
GROUP = "g"


class FlushRecordingBus(MemoryBus):
    """Notes, at each flush, the offsets the group had committed so far."""

    def __init__(self) -> None:
        super().__init__()
        self.committed_at_flush: list[dict[TopicPartition, int]] = []

    async def flush(self) -> None:
        self.committed_at_flush.append(self.committed(GROUP))


async def _bus(partitions: int) -> FlushRecordingBus:
    bus = FlushRecordingBus()
    await bus.start()
    await bus.create_topics([TopicSpec(TOPIC, partitions=partitions), TopicSpec("dlq")])
    return bus


async def _send(bus: MemoryBus, key: str, n: int) -> None:
    event = make_event(EventType.JOB_SUSPENDED, "test", key, JobRef(uid=f"{key}{n}"))
    await publish_event(bus, TOPIC, key, event)


async def _batch(consumer: EventConsumer, count: int) -> list[Record]:
    records = await consumer.subscription.poll(timeout=1, max_records=1000)
    assert len(records) == count
    return records


def _consumer(bus: MemoryBus, handler: EventHandler, concurrency: int) -> EventConsumer:
    return EventConsumer(
        bus,
        [TOPIC],
        handler,
        group=GROUP,
        dead_letter_topic="dlq",
        component="test",
        concurrency=concurrency,
    )


class KeyTracker:
    """A handler that fails if two records of one key overlap, and notes each key's records
    in the order handled and the most records in hand at once."""

    def __init__(self, pause: Callable[[str], float] = lambda key: 0.01) -> None:
        self.handled: dict[str, list[str]] = defaultdict(list)
        self.in_flight: dict[str, int] = defaultdict(int)
        self.most = 0
        self._pause = pause

    async def __call__(self, event: CloudEvent, record: Record) -> None:
        key = str(event.subject)
        self.in_flight[key] += 1
        assert self.in_flight[key] == 1, f"two records of {key} at once"
        self.most = max(self.most, sum(self.in_flight.values()))
        await asyncio.sleep(self._pause(key))
        self.handled[key].append(event.data["uid"])
        self.in_flight[key] -= 1


async def test_keys_overlap_up_to_the_bound_and_each_key_keeps_its_order() -> None:
    bus = await _bus(partitions=2)
    keys = ["a", "b", "c", "d", "e"]
    for n in range(4):
        for key in keys:
            await _send(bus, key, n)
    tracker = KeyTracker()
    consumer = _consumer(bus, tracker, concurrency=3)
    await consumer.subscription.start()
    records = await _batch(consumer, 20)
    await consumer.process(records)
    assert tracker.most == 3
    assert tracker.handled == {key: [f"{key}{n}" for n in range(4)] for key in keys}
    ends = {r.tp: r.offset + 1 for r in records}
    assert len(ends) == 2 and bus.committed(GROUP) == ends


async def test_the_batch_is_committed_only_once_every_key_has_settled() -> None:
    bus = await _bus(partitions=1)
    for key in ("slow", "quick"):
        await _send(bus, key, 0)
    release, quick_done = asyncio.Event(), asyncio.Event()
    done: list[str] = []

    async def handler(event: CloudEvent, record: Record) -> None:
        if event.subject == "slow":
            await release.wait()
        done.append(str(event.subject))
        quick_done.set()

    consumer = _consumer(bus, handler, concurrency=2)
    await consumer.subscription.start()
    processing = asyncio.create_task(consumer.process(await _batch(consumer, 2)))
    await asyncio.wait_for(quick_done.wait(), 5)
    await asyncio.sleep(0.05)
    assert done == ["quick"]
    assert bus.committed(GROUP) == {}  # the quick one is done, the offset waits for the slow
    release.set()
    await processing
    assert done == ["quick", "slow"]
    assert bus.committed_at_flush == [{}]  # flushed before the commit
    assert bus.committed(GROUP) == {TopicPartition(TOPIC, 0): 2}


class Crash(Exception):
    pass


async def test_a_failure_is_raised_as_is_and_only_the_handled_prefix_is_committed() -> None:
    bus = await _bus(partitions=2)
    first = next(k for k in ("k1", "k2", "k3", "k4") if partition_for(k.encode(), 2, 0) == 0)
    second = next(k for k in ("k5", "k6", "k7", "k8") if partition_for(k.encode(), 2, 0) == 0)
    last = next(k for k in ("k9", "k10", "k11", "k12") if partition_for(k.encode(), 2, 0) == 1)
    # Partition 0: first/0, second/0 (fails), first/1; partition 1: last/0.
    await _send(bus, first, 0)
    await _send(bus, second, 0)
    await _send(bus, first, 1)
    await _send(bus, last, 0)
    handled: list[str] = []
    first_done = asyncio.Event()

    async def handler(event: CloudEvent, record: Record) -> None:
        if event.subject == second:
            await first_done.wait()
            raise Crash("handler died")
        handled.append(event.data["uid"])
        if event.data["uid"] == f"{first}1":
            first_done.set()

    consumer = _consumer(bus, handler, concurrency=2)
    await consumer.subscription.start()
    with pytest.raises(Crash):
        await consumer.process(await _batch(consumer, 4))
    assert handled == [f"{first}0", f"{first}1"]  # the third key never started
    assert bus.committed(GROUP) == {}
    # A member joining takes partition 1 away: the revocation commits what was handled,
    # which in partition 0 stops before the record that failed.
    other = bus.subscribe([TOPIC], group=GROUP)
    await other.start()
    assert bus.committed(GROUP) == {TopicPartition(TOPIC, 0): 1}


def test_concurrency_below_one_is_refused() -> None:
    async def handler(event: CloudEvent, record: Record) -> None:
        pass

    with pytest.raises(ValueError, match="concurrency must be at least 1, not 0"):
        _consumer(MemoryBus(), handler, concurrency=0)


# -- run_by_key: records as they come, no batch barrier ---------------------------------------


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_a_slow_key_does_not_hold_up_keys_polled_after_it() -> None:
    bus = await _bus(partitions=1)
    release, slow_started = asyncio.Event(), asyncio.Event()
    done: list[str] = []

    async def handler(event: CloudEvent, record: Record) -> None:
        if event.subject == "slow":
            slow_started.set()
            await release.wait()
        done.append(str(event.subject))

    consumer = _consumer(bus, handler, concurrency=2)
    await consumer.subscription.start()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run_by_key(stop))
    await _send(bus, "slow", 0)
    await asyncio.wait_for(slow_started.wait(), 5)
    # Sent after the slow one is in hand: a consumer that finished each polled batch before
    # polling again would not see it until the slow one is done.
    await _send(bus, "quick", 0)
    await _until(lambda: done == ["quick"])
    assert bus.committed(GROUP) == {}  # offset 1 is handled, offset 0 is not yet
    release.set()
    await _until(lambda: bus.committed(GROUP) == {TopicPartition(TOPIC, 0): 2})
    assert done == ["quick", "slow"]
    stop.set()
    await asyncio.wait_for(running, 5)


async def test_keys_keep_their_order_and_the_bound_across_polls() -> None:
    bus = await _bus(partitions=3)
    keys = ["a", "b", "c", "d", "e", "f"]
    tracker = KeyTracker(pause=lambda key: 0.005 * (1 + keys.index(key) % 3))
    consumer = _consumer(bus, tracker, concurrency=3)
    await consumer.subscription.start()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run_by_key(stop, max_pending=5))
    for n in range(6):  # in several waves, while earlier ones are still handled
        for key in keys:
            await _send(bus, key, n)
        await asyncio.sleep(0.01)
    expected = {key: [f"{key}{n}" for n in range(6)] for key in keys}
    await _until(lambda: tracker.handled == expected)
    assert tracker.most == 3
    ends: dict[TopicPartition, int] = {}
    for record in bus.records(TOPIC):
        ends[record.tp] = max(ends.get(record.tp, 0), record.offset + 1)
    await _until(lambda: bus.committed(GROUP) == ends)
    stop.set()
    await asyncio.wait_for(running, 5)


async def test_run_by_key_raises_the_failure_as_is_and_commits_the_handled_prefix() -> None:
    bus = await _bus(partitions=1)
    for key in ("good", "bad", "late"):
        await _send(bus, key, 0)
    handled: list[str] = []

    async def handler(event: CloudEvent, record: Record) -> None:
        if event.subject == "bad":
            raise Crash("handler died")
        handled.append(str(event.subject))

    consumer = _consumer(bus, handler, concurrency=1)
    await consumer.subscription.start()
    with pytest.raises(Crash):
        await asyncio.wait_for(consumer.run_by_key(asyncio.Event()), 5)
    assert handled == ["good"]  # nothing starts after the failure
    assert bus.committed(GROUP) == {TopicPartition(TOPIC, 0): 1}


async def test_a_stop_waits_for_the_records_in_hand_and_cancels_only_the_poll() -> None:
    bus = await _bus(partitions=1)
    release, started = asyncio.Event(), asyncio.Event()

    async def handler(event: CloudEvent, record: Record) -> None:
        started.set()
        await release.wait()

    consumer = _consumer(bus, handler, concurrency=2)
    await consumer.subscription.start()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run_by_key(stop))
    await _send(bus, "held", 0)
    await asyncio.wait_for(started.wait(), 5)
    stop.set()
    await asyncio.sleep(0.1)
    assert not running.done()  # the record in hand is finished first
    release.set()
    await asyncio.wait_for(running, 5)
    assert bus.committed(GROUP) == {TopicPartition(TOPIC, 0): 1}
    # Idle: the stop does not wait for the poll's timeout.
    stop = asyncio.Event()
    idle = asyncio.create_task(consumer.run_by_key(stop))
    await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(idle, 0.3)


async def test_cancelling_run_by_key_cancels_the_records_in_hand() -> None:
    bus = await _bus(partitions=1)
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(event: CloudEvent, record: Record) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    consumer = _consumer(bus, handler, concurrency=2)
    await consumer.subscription.start()
    running = asyncio.create_task(consumer.run_by_key(asyncio.Event()))
    await _send(bus, "stuck", 0)
    await asyncio.wait_for(started.wait(), 5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert cancelled.is_set()  # the handler did not outlive its consumer
    assert bus.committed(GROUP) == {}
