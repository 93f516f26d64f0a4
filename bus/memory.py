"""An in-process bus with Kafka's semantics: partitions by key, groups, commits, redelivery."""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bus.base import (
    Bus,
    BusError,
    Headers,
    Record,
    RecordMetadata,
    RevokeCallback,
    StartFrom,
    Subscription,
    TopicPartition,
    TopicSpec,
    UnknownTopicError,
)


def partition_for(key: bytes | None, partitions: int, counter: int) -> int:
    """Same key, same partition (order per key); keyless records spread round-robin."""
    if key is None:
        return counter % partitions
    return zlib.crc32(key) % partitions


@dataclass
class _Group:
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    members: list[MemorySubscription] = field(default_factory=list)


def _append(
    partitions: list[list[Record]],
    topic: str,
    index: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
) -> int:
    """Append one record to a partition's log; returns its offset."""
    log = partitions[index]
    log.append(
        Record(
            topic=topic,
            partition=index,
            offset=len(log),
            key=key,
            value=value,
            headers=tuple(headers),
            timestamp_ms=int(time.time() * 1000),
        )
    )
    return len(log) - 1


class MemoryBus(Bus):
    def __init__(self) -> None:
        self._logs: dict[str, list[list[Record]]] = {}
        self._specs: dict[str, TopicSpec] = {}
        self._groups: dict[str, _Group] = {}
        self._waiters: set[asyncio.Event] = set()
        self._by_prefix: set[MemorySubscription] = set()
        """Started subscriptions without a group that follow a prefix: new topics join them."""
        self._keyless = itertools.count()
        self._closed = False

    async def start(self) -> None:
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        self._notify()

    async def create_topics(self, specs: Sequence[TopicSpec], *, wait: float = 0.0) -> None:
        for spec in specs:
            if spec.name not in self._logs:
                self._logs[spec.name] = [[] for _ in range(spec.partitions)]
                self._specs[spec.name] = spec
        for group in self._groups.values():
            await self._rebalance(group)
        for subscription in list(self._by_prefix):
            await subscription._assign(set(self._partitions(subscription.topics)), {})

    def topics(self) -> list[str]:
        return sorted(self._logs)

    def partitions_of(self, topic: str) -> int:
        return len(self._logs.get(topic, []))

    def records(self, topic: str) -> list[Record]:
        """Every record of a topic, for tests and tools."""
        return sorted(
            (r for part in self._logs.get(topic, []) for r in part),
            key=lambda r: (r.timestamp_ms, r.partition, r.offset),
        )

    async def publish(
        self, topic: str, value: bytes | None, *, key: bytes | None = None, headers: Headers = ()
    ) -> RecordMetadata:
        if self._closed:
            raise BusError("bus is closed")
        partitions = self._logs.get(topic)
        if partitions is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        index = partition_for(key, len(partitions), next(self._keyless))
        offset = _append(partitions, topic, index, key, value, headers)
        self._notify()
        return RecordMetadata(topic, index, offset)

    async def publish_to_every_partition(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers = ()
    ) -> None:
        partitions = self._logs.get(topic)
        if partitions is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        for index in range(len(partitions)):
            _append(partitions, topic, index, key, value, headers)
        self._notify()

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        group: str | None,
        start_from: StartFrom = "earliest",
        on_revoke: RevokeCallback | None = None,
        session_timeout: float | None = None,
        sticky: bool = False,
        prefix: str | None = None,
    ) -> MemorySubscription:
        # Sticky either way: members keep their join order, and so their ranges.
        return MemorySubscription(self, list(topics), group, start_from, on_revoke, prefix)

    def committed(self, group: str) -> dict[TopicPartition, int]:
        return dict(self._groups.get(group, _Group()).committed)

    # -- internals used by MemorySubscription -------------------------------------------

    def _partitions(self, topics: Sequence[str]) -> list[TopicPartition]:
        missing = [t for t in topics if t not in self._logs]
        if missing:
            raise UnknownTopicError(f"topics do not exist: {', '.join(missing)}")
        return [TopicPartition(t, p) for t in topics for p in range(len(self._logs[t]))]

    def _end_offset(self, tp: TopicPartition) -> int:
        return len(self._logs[tp.topic][tp.partition])

    def _read(self, tp: TopicPartition, offset: int, limit: int) -> list[Record]:
        return self._logs[tp.topic][tp.partition][offset : offset + limit]

    async def _join(self, name: str, member: MemorySubscription) -> None:
        group = self._groups.setdefault(name, _Group())
        group.members.append(member)
        await self._rebalance(group)

    async def _leave(self, name: str, member: MemorySubscription) -> None:
        group = self._groups[name]
        group.members.remove(member)
        await self._rebalance(group)

    async def _rebalance(self, group: _Group) -> None:
        """Range-assign every partition subscribed by the group across its members."""
        wanted: dict[MemorySubscription, list[TopicPartition]] = {m: [] for m in group.members}
        all_tps = sorted({tp for m in group.members for tp in self._partitions(m.topics)})
        for i, tp in enumerate(all_tps):
            subscribers = [m for m in group.members if tp.topic in m.topics]
            wanted[subscribers[i % len(subscribers)]].append(tp)
        for member in group.members:
            await member._assign(set(wanted[member]), group.committed)
        self._notify()

    def _notify(self) -> None:
        for waiter in self._waiters:
            waiter.set()


class MemorySubscription(Subscription):
    def __init__(
        self,
        bus: MemoryBus,
        topics: list[str],
        group: str | None,
        start_from: StartFrom,
        on_revoke: RevokeCallback | None,
        prefix: str | None = None,
    ) -> None:
        self._bus = bus
        self._named = topics
        self._prefix = prefix
        self._group = group
        self._start_from = start_from
        self._on_revoke = on_revoke
        self._positions: dict[TopicPartition, int] = {}
        self._started = False
        self._wakeup = asyncio.Event()

    @property
    def topics(self) -> list[str]:
        """The topics subscribed now: by name, and those existing with the prefix."""
        if self._prefix is None:
            return self._named
        prefix = self._prefix
        matching = [t for t in self._bus.topics() if t.startswith(prefix)]
        return [*self._named, *(t for t in matching if t not in self._named)]

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._bus._waiters.add(self._wakeup)
        if self._group is None:
            if self._prefix is not None:
                self._bus._by_prefix.add(self)
            await self._assign(set(self._bus._partitions(self.topics)), {})
        else:
            await self._bus._join(self._group, self)

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        self._bus._waiters.discard(self._wakeup)
        self._bus._by_prefix.discard(self)
        if self._group is not None:
            await self._bus._leave(self._group, self)
        self._positions.clear()

    async def _assign(
        self, partitions: set[TopicPartition], committed: Mapping[TopicPartition, int]
    ) -> None:
        revoked = set(self._positions) - partitions
        if revoked and self._on_revoke is not None:
            await self._on_revoke(revoked)
        for tp in revoked:
            del self._positions[tp]
        for tp in partitions - set(self._positions):
            if tp in committed:
                self._positions[tp] = committed[tp]
            elif self._start_from == "earliest":
                self._positions[tp] = 0
            else:
                self._positions[tp] = self._bus._end_offset(tp)

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def _take(self, max_records: int) -> list[Record]:
        taken: list[Record] = []
        for tp in sorted(self._positions):
            if len(taken) >= max_records:
                break
            batch = self._bus._read(tp, self._positions[tp], max_records - len(taken))
            if batch:
                self._positions[tp] += len(batch)
                taken.extend(batch)
        return taken

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        if not self._started:
            raise BusError("subscription is not started")
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            self._wakeup.clear()
            records = self._take(max_records)
            remaining = deadline - asyncio.get_running_loop().time()
            if not records and self._bus._closed:
                # As a Kafka consumer whose client is closed: an empty answer would have a
                # polling loop spin forever without ever yielding.
                raise BusError("the bus is closed")
            if records or remaining <= 0:
                return records
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            try:
                async with asyncio.timeout(remaining):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self._group is None:
            return
        group = self._bus._groups[self._group]
        for tp, offset in offsets.items():
            # Like Kafka after a rebalance: a member may only commit what it owns.
            if tp in self._positions:
                group.committed[tp] = offset

    async def lag(self) -> int:
        return sum(self._bus._end_offset(tp) - pos for tp, pos in self._positions.items())

    async def ends(self) -> dict[TopicPartition, int]:
        return {tp: self._bus._end_offset(tp) for tp in self._positions}

    async def positions(self) -> dict[TopicPartition, int]:
        return dict(self._positions)

    async def unassigned(self) -> int:
        return len(set(self._bus._partitions(self.topics)) - set(self._positions))

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp not in self._positions:
            raise BusError(f"cannot seek {tp.topic}[{tp.partition}]: not assigned")
        self._positions[tp] = max(0, min(offset, self._bus._end_offset(tp)))

    async def seek_to_time(self, timestamp_ms: int) -> None:
        for tp in self._positions:
            log = self._bus._logs[tp.topic][tp.partition]
            self._positions[tp] = next(
                (r.offset for r in log if r.timestamp_ms >= timestamp_ms), len(log)
            )
