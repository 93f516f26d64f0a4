"""The status stream for producers: status events from any point of the status topic, each
with its position, so that a pipeline that restarts resumes exactly after the last one it
handled (neither losing nor repeating one)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from bus.base import Bus, TopicPartition
from bus.epochs import EpochFence
from bus.topics import Topics
from schemas.events import JobStatusUpdate
from schemas.status import JobPhase
from trainhub.sdk_view import WORKER_SOURCE_PREFIX, decode_status, record_time

DEFAULT_QUEUE = "default"
"""The queue of a job whose `schedulingPolicy.queue` is unset (as the hub counts it)."""

Positions = Mapping[int, int] | Mapping[str, int]
"""Partition -> offset of the last event handled there (string keys as JSON gives them back)."""


@dataclass(frozen=True)
class StatusEvent:
    """One status update and where it sits on the status topic."""

    partition: int
    offset: int
    time: datetime
    source: str
    update: JobStatusUpdate

    @property
    def position(self) -> tuple[int, int]:
        """Keep `positions[partition] = offset`; pass `positions` as `from_offset` to resume."""
        return self.partition, self.offset

    @property
    def uid(self) -> str:
        return self.update.uid

    @property
    def phase(self) -> JobPhase:
        return self.update.phase

    @property
    def from_worker(self) -> bool:
        return self.source.startswith(WORKER_SOURCE_PREFIX)


async def stream_status(
    bus: Bus,
    topics: Topics,
    *,
    uids: Collection[str] | None = None,
    queue: str | None = None,
    queues: Mapping[str, str | None] | None = None,
    from_offset: Positions | None = None,
    from_time: datetime | None = None,
    follow: bool = True,
    poll_timeout: float = 0.5,
) -> AsyncIterator[StatusEvent]:
    """Status events of some jobs (`uids`), of one queue, or of all jobs.

    Starts at the topic's beginning, at `from_time`, or right after the positions in
    `from_offset` (partitions it does not name are read from their beginning). Workers'
    updates do not carry the queue: `queues` (uid -> queue) names the queues of jobs whose hub
    updates came before the starting point. Without `follow` it ends at the topic's end."""
    if from_offset is not None and from_time is not None:
        raise ValueError("give from_offset or from_time, not both")
    known_queues = dict(queues or {})
    fence = EpochFence()  # a hub that lost its lead is not believed (bus/epochs.py)
    subscription = bus.subscribe([topics.status], group=None, start_from="earliest")
    await subscription.start()
    try:
        if from_time is not None:
            await subscription.seek_to_time(int(from_time.timestamp() * 1000))
        for partition, offset in (from_offset or {}).items():
            await subscription.seek(TopicPartition(topics.status, int(partition)), offset + 1)
        while True:
            for record in await subscription.poll(timeout=poll_timeout):
                if not fence.admits(record):
                    continue
                decoded = decode_status(record)
                if decoded is None:
                    continue
                update, source = decoded
                if update.queue is not None:
                    known_queues[update.uid] = update.queue
                if uids is not None and update.uid not in uids:
                    continue
                if queue is not None and (known_queues.get(update.uid) or DEFAULT_QUEUE) != queue:
                    continue
                yield StatusEvent(
                    record.partition, record.offset, record_time(record), source, update
                )
            if not follow and await subscription.lag() == 0:
                return
    finally:
        await subscription.stop()
