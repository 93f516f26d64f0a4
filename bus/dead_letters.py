"""The dead-letter topic: records nobody could use, kept with the reason, never dropped."""

from __future__ import annotations

import logging

from bus.base import Bus, Record
from bus.reading import records_to_end

DeadLetterKey = tuple[str, int, int, bytes]
"""Where a dead-lettered record came from (topic, partition, offset) and its value."""

log = logging.getLogger(__name__)

REASON_HEADER = "trainhub_dlq_reason"
_COMPONENT = "trainhub_dlq_component"
_TOPIC = "trainhub_dlq_topic"
_PARTITION = "trainhub_dlq_partition"
_OFFSET = "trainhub_dlq_offset"


async def dead_letter(bus: Bus, topic: str, record: Record, reason: str, component: str) -> None:
    """Copy `record` to the dead-letter topic with where it came from and why it failed."""
    headers = (
        *record.headers,
        (REASON_HEADER, reason.encode()[:4096]),
        (_COMPONENT, component.encode()),
        (_TOPIC, record.topic.encode()),
        (_PARTITION, str(record.partition).encode()),
        (_OFFSET, str(record.offset).encode()),
    )
    await bus.publish(topic, record.value or b"", key=record.key, headers=headers)
    log.warning(
        "dead-lettered record",
        extra={"topic": record.topic, "offset": record.offset, "reason": reason},
    )


def dead_letter_reason(record: Record) -> str | None:
    for key, value in record.headers:
        if key == REASON_HEADER:
            return value.decode(errors="replace")
    return None


def dead_letter_key(record: Record) -> DeadLetterKey:
    return record.topic, record.partition, record.offset, record.value or b""


async def dead_lettered_by(bus: Bus, topic: str, component: str) -> set[DeadLetterKey]:
    """The records `component` has already copied to the dead-letter topic `topic`.

    A consumer without a group reads its topics from the start on every restart (the hub's
    status and heartbeats are its state): it must not copy, count and alert on the same bad
    records again each time. The value is part of the key, so a topic deleted and created
    again (offsets from 0) does not hide a new bad record at an old offset."""
    found: set[DeadLetterKey] = set()
    async for record in records_to_end(bus, topic):
        headers = dict(record.headers)
        if headers.get(_COMPONENT) != component.encode():
            continue
        try:
            source = headers[_TOPIC].decode()
            partition, offset = int(headers[_PARTITION]), int(headers[_OFFSET])
        except (KeyError, ValueError, UnicodeDecodeError):
            continue  # not one of ours, or damaged: never matches a record
        found.add((source, partition, offset, record.value or b""))
    return found
