"""The in-memory bus keeping its own copies of what is published (bench/soak_heap.py): what
its logs hold is then allocated in this file, which a tracemalloc filter can leave out, not
where the sender made it."""

from __future__ import annotations

from bus.base import Headers, RecordMetadata
from bus.memory import MemoryBus


def _copied(value: bytes | None) -> bytes | None:
    return None if value is None else bytes(bytearray(value))


def _headers(headers: Headers) -> Headers:
    return tuple(((k + ".")[:-1], bytes(bytearray(v))) for k, v in headers)


class CopyingBus(MemoryBus):
    async def publish(
        self, topic: str, value: bytes | None, *, key: bytes | None = None, headers: Headers = ()
    ) -> RecordMetadata:
        return await super().publish(
            topic, _copied(value), key=_copied(key), headers=_headers(headers)
        )

    async def publish_to_every_partition(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers = ()
    ) -> None:
        await super().publish_to_every_partition(
            topic, bytes(bytearray(value)), key=_copied(key), headers=_headers(headers)
        )
