"""Reading a topic from its start to its current end, without a consumer group."""

from __future__ import annotations

from collections.abc import AsyncIterator

from bus.base import Bus, Record


async def records_to_end(bus: Bus, topic: str) -> AsyncIterator[Record]:
    """Every record of `topic` from its start to its end when read, in each partition's order.
    The lag is asked before each poll: a poll of a topic with nothing left waits its whole
    timeout."""
    subscription = bus.subscribe([topic], group=None, start_from="earliest")
    await subscription.start()
    try:
        while await subscription.lag() > 0:
            for record in await subscription.poll(timeout=0.2, max_records=5000):
                yield record
    finally:
        await subscription.stop()
