"""The one small transport interface every component talks through (shaped after Kafka)."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Headers = tuple[tuple[str, bytes], ...]
StartFrom = Literal["earliest", "latest"]


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True)
class Record:
    """One record as a consumer sees it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_ms: int = 0

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 3
    replication: int = 1
    retention_ms: int | None = None
    compacted: bool = False
    extra_config: Mapping[str, str] = field(default_factory=dict)


class BusError(RuntimeError):
    """A transport failure that retrying will not fix (bad credentials, missing topic...)."""


class UnknownTopicError(BusError):
    pass


class BusPermissionError(BusError):
    """The bus refuses this client what it tried (Kafka ACLs); retrying will not help."""


RevokeCallback = Callable[[set[TopicPartition]], Awaitable[None]]


class Subscription(abc.ABC):
    """A consumer: in a group (committed offsets shared by members) or standalone."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @abc.abstractmethod
    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        """Records after the current position; empty after `timeout` seconds without any."""

    @abc.abstractmethod
    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Store, for the group, the next offset to read of each partition."""

    @abc.abstractmethod
    def assignment(self) -> set[TopicPartition]: ...

    @abc.abstractmethod
    async def seek_to_time(self, timestamp_ms: int) -> None:
        """Move every assigned partition to the first record at or after the time."""

    @abc.abstractmethod
    async def seek(self, tp: TopicPartition, offset: int) -> None:
        """Move one assigned partition so that the next record read is the one at `offset`."""

    @abc.abstractmethod
    async def lag(self) -> int:
        """Records after the current position of every assigned partition."""

    @abc.abstractmethod
    async def ends(self) -> dict[TopicPartition, int]:
        """The end offset of each assigned partition now (the broker's answer)."""

    @abc.abstractmethod
    async def positions(self) -> dict[TopicPartition, int]:
        """The offset of the next record `poll` returns, per assigned partition."""

    @abc.abstractmethod
    async def unassigned(self) -> int:
        """Partitions of the subscribed topics that exist now (by name or by prefix) and
        that this consumer does not hold: 0 once a group's only member has all of them."""

    async def __aenter__(self) -> Subscription:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class Bus(abc.ABC):
    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def create_topics(self, specs: Sequence[TopicSpec], *, wait: float = 0.0) -> None:
        """Create what is missing; existing topics are left as they are. `wait`: for up to
        that many seconds, wait for the topics this client may not create (under ACLs the
        hub creates the shared ones) to be created by another; 0: do not wait for them."""

    @abc.abstractmethod
    async def publish(
        self, topic: str, value: bytes | None, *, key: bytes | None = None, headers: Headers = ()
    ) -> RecordMetadata:
        """Durably append one record (acknowledged by every in-sync replica); a None value is
        a tombstone, which compaction removes with the key's earlier records."""

    async def send(
        self, topic: str, value: bytes | None, *, key: bytes | None = None, headers: Headers = ()
    ) -> None:
        """Queue one record without waiting for it; `flush` waits for everything queued.

        Order per key is kept. Use it on hot paths and call `flush` before committing
        the offsets of the input that caused the records.
        """
        await self.publish(topic, value, key=key, headers=headers)

    async def flush(self) -> None:
        """Wait until every record queued with `send` is durable."""

    @abc.abstractmethod
    async def publish_to_every_partition(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers = ()
    ) -> None:
        """Durably append the record to each partition of `topic` (after what is queued):
        a marker every reader meets whatever partitions it reads, in their order."""

    @abc.abstractmethod
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
    ) -> Subscription:
        """A new, not yet started consumer of `topics`, and with `prefix` of every topic
        whose name starts with it, those created later too (found within seconds: how a hub
        hears each member cluster on a topic of its own). `session_timeout`: seconds after
        which a group member that stopped answering (killed, paused) loses its partitions,
        where the default (10 s) is too slow. `sticky`: a rebalance leaves each member the
        partitions it holds where it can (a member joining or leaving moves no others)."""
