"""TrainJob runtimes on the bus: operators apply and delete them on the compacted runtimes
topic (one record per runtime, keyed `KIND/NAMESPACE/NAME`; a tombstone deletes); the hub
follows it (dispatcher/runtime_follower.py) and clients read it to its end."""

from __future__ import annotations

import logging

from bus.base import Bus, Record
from bus.events import publish_payload
from bus.reading import records_to_end
from bus.topics import Topics
from schemas.codec import decode_event
from schemas.events import EventType, RuntimeApplied
from schemas.trainer import AnyRuntime
from schemas.trainer_runtimes import (
    BUS,
    RuntimeCatalog,
    RuntimeKey,
    key_of_record,
    parse_runtime,
    record_key,
    runtime_catalog,
    runtime_document,
    runtime_key,
)

log = logging.getLogger(__name__)

OPERATOR_SOURCE = "trainhub-operator"
"""The CloudEvent `source` of what `trainhub runtime apply` and the SDK write."""


def decode_runtime_record(record: Record) -> tuple[RuntimeKey, AnyRuntime | None]:
    """The runtime a runtimes-topic record applies (None: a tombstone deletes the key's).
    ValueError naming what is wrong: an unusable key, an undecodable event, another event
    type, a document upstream's rules refuse, or one that is not the runtime its key names."""
    if record.key is None:
        raise ValueError("runtime record without a key (expected KIND/NAMESPACE/NAME)")
    key = key_of_record(record.key.decode(errors="replace"))
    if record.value is None:
        return key, None
    event = decode_event(record.headers, record.value)
    if event.type != EventType.RUNTIME_APPLIED:
        raise ValueError(
            f"event type {event.type!r} on the runtimes topic (it takes "
            f"{EventType.RUNTIME_APPLIED} and tombstones)"
        )
    runtime = parse_runtime(event.data_as(RuntimeApplied).runtime, f"runtime {record_key(key)}")
    if runtime_key(runtime) != key:
        raise ValueError(
            f"runtime record key {record_key(key)!r} names another runtime than its document "
            f"({record_key(runtime_key(runtime))!r})"
        )
    return key, runtime


def apply_record(catalog: RuntimeCatalog, record: Record) -> RuntimeKey:
    """Apply one runtimes-topic record to `catalog` (a tombstone removes); ValueError as
    `decode_runtime_record`, leaving the catalog as it was."""
    key, runtime = decode_runtime_record(record)
    if runtime is None:
        catalog.remove(key)
    else:
        catalog.add(runtime, BUS)
    return key


async def apply_runtime(
    bus: Bus, topics: Topics, runtime: AnyRuntime, *, source: str = OPERATOR_SOURCE
) -> str:
    """Publish a validated runtime (replacing the bus's one of the same key); its key."""
    key = record_key(runtime_key(runtime))
    payload = RuntimeApplied(runtime=runtime_document(runtime))
    await publish_payload(bus, topics.runtimes, key, EventType.RUNTIME_APPLIED, source, payload)
    return key


async def delete_runtime(bus: Bus, topics: Topics, key: RuntimeKey) -> None:
    """A tombstone: the bus's runtime of that key is gone (a shipped or file runtime of the
    same key shows again)."""
    await bus.publish(topics.runtimes, None, key=record_key(key).encode())


async def read_runtimes(bus: Bus, topics: Topics) -> RuntimeCatalog:
    """The runtimes on the bus as of now, over this process's (shipped and files). Records
    the hub would dead-letter are passed over here, logged."""
    catalog = RuntimeCatalog(base=runtime_catalog)
    async for record in records_to_end(bus, topics.runtimes):
        try:
            apply_record(catalog, record)
        except ValueError as exc:
            log.warning("runtime record passed over: %s", exc, extra={"offset": record.offset})
    return catalog
