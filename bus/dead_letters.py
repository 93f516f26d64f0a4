"""The dead-letter topic: records nobody could use, kept with the reason, never dropped."""

from __future__ import annotations

import logging

from bus.base import Bus, Record

log = logging.getLogger(__name__)

REASON_HEADER = "trainhub_dlq_reason"


async def dead_letter(bus: Bus, topic: str, record: Record, reason: str, component: str) -> None:
    """Copy `record` to the dead-letter topic with where it came from and why it failed."""
    headers = (
        *record.headers,
        (REASON_HEADER, reason.encode()[:4096]),
        ("trainhub_dlq_component", component.encode()),
        ("trainhub_dlq_topic", record.topic.encode()),
        ("trainhub_dlq_partition", str(record.partition).encode()),
        ("trainhub_dlq_offset", str(record.offset).encode()),
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
