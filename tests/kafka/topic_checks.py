"""Waiting for topics that another process creates (the hub, under ACLs)."""

from __future__ import annotations

import asyncio
import time

from bus.kafka import KafkaBus


async def topics_exist(bus: KafkaBus, names: set[str], timeout: float) -> bool:
    """Whether `names` are all listed within `timeout` seconds, asked as `bus`'s user."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert bus._admin is not None
        if names <= set(await bus._admin.list_topics()):
            return True
        await asyncio.sleep(0.3)
    return False
