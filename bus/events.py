"""CloudEvents over the bus: publish typed events, consume them with commits and dead letters."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bus.base import Bus, Record, Subscription, TopicPartition
from bus.dead_letters import dead_letter
from schemas.codec import decode_event, encode_event
from schemas.errors import EventDecodeError
from schemas.events import CloudEvent

log = logging.getLogger(__name__)

EventHandler = Callable[[CloudEvent, Record], Awaitable[None]]


async def publish_event(bus: Bus, topic: str, key: str, event: CloudEvent) -> None:
    headers, body = encode_event(event)
    await bus.publish(topic, body, key=key.encode(), headers=tuple(headers))


class EventConsumer:
    """Runs one subscription: decode, hand to the handler, commit after the handler returns.

    Undecodable records go to the dead-letter topic and are committed past, so a poison
    record never blocks its partition. A handler that raises ValueError has judged the event
    invalid: that record is dead-lettered too. Any other exception stops the consumer
    without committing, so the record is delivered again after a restart.
    """

    def __init__(
        self,
        bus: Bus,
        subscription: Subscription,
        handler: EventHandler,
        *,
        dead_letter_topic: str,
        component: str,
        on_dead_letter: Callable[[Record, str], Awaitable[None]] | None = None,
    ) -> None:
        self._bus = bus
        self.subscription = subscription
        self._handler = handler
        self._dlq = dead_letter_topic
        self._component = component
        self._on_dead_letter = on_dead_letter
        self.idle = asyncio.Event()

    async def run(self) -> None:
        while True:
            records = await self.subscription.poll(timeout=0.5)
            if not records:
                self.idle.set()
                continue
            self.idle.clear()
            await self.process(records)

    async def process(self, records: list[Record]) -> None:
        offsets: dict[TopicPartition, int] = {}
        for record in records:
            await self._handle_one(record)
            offsets[record.tp] = record.offset + 1
        await self.subscription.commit(offsets)

    async def _handle_one(self, record: Record) -> None:
        try:
            event = decode_event(record.headers, record.value)
        except EventDecodeError as exc:
            await self._reject(record, f"undecodable: {exc}")
            return
        try:
            await self._handler(event, record)
        except (ValueError, TypeError) as exc:
            await self._reject(record, f"invalid {event.type}: {exc}")

    async def _reject(self, record: Record, reason: str) -> None:
        await dead_letter(self._bus, self._dlq, record, reason, self._component)
        if self._on_dead_letter is not None:
            await self._on_dead_letter(record, reason)
