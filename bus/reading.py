"""Reading a topic from its start to its current end, without a consumer group."""

from __future__ import annotations

from collections.abc import AsyncIterator

from bus.base import Bus, Record, TopicPartition


async def records_to_end(
    bus: Bus, topic: str, *, positions: dict[TopicPartition, int] | None = None
) -> AsyncIterator[Record]:
    """Every record of `topic` from its start to its end when read, in each partition's order.
    The lag is asked before each poll: a poll of a topic with nothing left waits its whole
    timeout.

    `positions`: a partition found there is read from that offset rather than its start (one
    before the log's start, removed by retention, reads from the start), and each record
    moves its partition's position past it as it is yielded: a reader that keeps the dict
    reads only what came after its last read the next time."""
    subscription = bus.subscribe([topic], group=None, start_from="earliest")
    await subscription.start()
    try:
        if positions:
            for tp in subscription.assignment():
                offset = positions.get(tp)
                if offset is not None:
                    await subscription.seek(tp, offset)
        while await subscription.lag() > 0:
            for record in await subscription.poll(timeout=0.2, max_records=5000):
                if positions is not None:
                    positions[record.tp] = record.offset + 1
                yield record
    finally:
        await subscription.stop()
