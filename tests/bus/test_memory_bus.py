"""The in-memory bus keeps Kafka's semantics: per-key order, group offsets, redelivery."""

from __future__ import annotations

import asyncio

import pytest

from bus.base import TopicPartition, TopicSpec, UnknownTopicError
from bus.memory import MemoryBus


async def _bus(partitions: int = 4) -> MemoryBus:
    bus = MemoryBus()
    await bus.start()
    await bus.create_topics([TopicSpec("t", partitions=partitions)])
    return bus


async def test_order_is_kept_per_key_across_partitions() -> None:
    bus = await _bus()
    for i in range(50):
        for key in ("a", "b", "c"):
            await bus.publish("t", f"{key}{i}".encode(), key=key.encode())
    sub = bus.subscribe(["t"], group=None)
    await sub.start()
    records = await sub.poll(timeout=0.1, max_records=1000)
    assert len(records) == 150
    for raw_key in (b"a", b"b", b"c"):
        values = [r.value for r in records if r.key == raw_key]
        assert values == [raw_key + str(i).encode() for i in range(50)]
        assert len({r.partition for r in records if r.key == raw_key}) == 1


async def test_uncommitted_records_are_redelivered_to_the_next_member() -> None:
    bus = await _bus(partitions=1)
    for i in range(10):
        await bus.publish("t", str(i).encode(), key=b"k")
    first = bus.subscribe(["t"], group="g")
    await first.start()
    batch = await first.poll(timeout=0.1, max_records=4)
    assert [r.value for r in batch] == [b"0", b"1", b"2", b"3"]
    await first.commit({batch[-1].tp: batch[-1].offset + 1})
    await first.poll(timeout=0.1, max_records=3)  # read but never committed
    await first.stop()
    second = bus.subscribe(["t"], group="g")
    await second.start()
    again = await second.poll(timeout=0.1)
    assert [r.value for r in again] == [str(i).encode() for i in range(4, 10)]
    assert bus.committed("g") == {TopicPartition("t", 0): 4}


async def test_group_members_split_partitions_and_rebalance_on_leave() -> None:
    bus = await _bus(partitions=4)
    revoked: list[set[TopicPartition]] = []

    async def on_revoke(tps: set[TopicPartition]) -> None:
        revoked.append(tps)

    a = bus.subscribe(["t"], group="g", on_revoke=on_revoke)
    b = bus.subscribe(["t"], group="g")
    await a.start()
    assert len(a.assignment()) == 4
    await b.start()
    assert len(a.assignment()) == 2 and len(b.assignment()) == 2
    assert not a.assignment() & b.assignment()
    assert revoked and len(revoked[0]) == 2
    await b.stop()
    assert len(a.assignment()) == 4


async def test_separate_groups_each_get_everything() -> None:
    bus = await _bus(partitions=2)
    for i in range(6):
        await bus.publish("t", b"x", key=str(i).encode())
    for group in ("g1", "g2"):
        sub = bus.subscribe(["t"], group=group)
        await sub.start()
        assert len(await sub.poll(timeout=0.1)) == 6


async def test_latest_skips_history_and_poll_wakes_on_publish() -> None:
    bus = await _bus(partitions=1)
    await bus.publish("t", b"old")
    sub = bus.subscribe(["t"], group=None, start_from="latest")
    await sub.start()
    waiter = asyncio.create_task(sub.poll(timeout=5))
    await asyncio.sleep(0.05)
    await bus.publish("t", b"new")
    records = await asyncio.wait_for(waiter, 1)
    assert [r.value for r in records] == [b"new"]


async def test_unknown_topic_is_an_error() -> None:
    bus = await _bus()
    with pytest.raises(UnknownTopicError):
        await bus.publish("missing", b"x")
    with pytest.raises(UnknownTopicError):
        await bus.subscribe(["missing"], group="g").start()


async def test_seek_to_time() -> None:
    bus = await _bus(partitions=1)
    await bus.publish("t", b"before")
    await asyncio.sleep(0.01)
    cut = bus.records("t")[-1].timestamp_ms + 1
    await asyncio.sleep(0.01)
    await bus.publish("t", b"after")
    sub = bus.subscribe(["t"], group=None)
    await sub.start()
    await sub.seek_to_time(cut)
    assert [r.value for r in await sub.poll(timeout=0.1)] == [b"after"]


@pytest.mark.parametrize("group", ["g", None])
async def test_a_prefix_subscription_follows_topics_created_later(group: str | None) -> None:
    bus = MemoryBus()
    await bus.start()
    await bus.create_topics([TopicSpec("r.east", partitions=1), TopicSpec("other", 1)])
    await bus.publish("r.east", b"e1")
    sub = bus.subscribe([], group=group, prefix="r.")
    await sub.start()
    assert await sub.unassigned() == 0
    assert [r.value for r in await sub.poll(timeout=0.1)] == [b"e1"]
    await bus.publish("other", b"never")
    await bus.create_topics([TopicSpec("r.west", partitions=2)])
    await bus.publish("r.west", b"w1", key=b"k")
    assert await sub.unassigned() == 0
    assert [r.value for r in await sub.poll(timeout=0.1)] == [b"w1"]
    assert {tp.topic for tp in sub.assignment()} == {"r.east", "r.west"}
    await sub.stop()
