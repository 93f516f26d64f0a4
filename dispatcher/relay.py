"""Passing a worker's report on to the topics everyone reads, as the hub that accepted it.

The record goes on byte for byte (its event id, source and body are the worker's), with the
leading hub's epoch in place of any it carried and a header naming the hub that relayed it:
readers fence it like anything else a hub writes (bus/epochs.py), and the hub itself passes
over its own relays when it reads those topics live.
"""

from __future__ import annotations

from bus.base import Record
from bus.epochs import EPOCH_HEADER
from bus.events import header_is
from dispatcher.hub_context import HubContext

RELAYED_BY = "trainhub_relayedby"
"""Header: the source of the hub that passed the record on."""


def relayed_by(record: Record, source: bytes) -> bool:
    """Whether a hub with this source passed the record on."""
    return header_is(record, RELAYED_BY, source)


async def relay(context: HubContext, record: Record, topic: str) -> None:
    """Queue the record on `topic` (flushed with the hub's other output, before the offsets
    of the reports it came from are committed)."""
    kept = tuple((k, v) for k, v in record.headers if k not in (EPOCH_HEADER, RELAYED_BY))
    stamp = [(RELAYED_BY, context.config.source.encode())]
    if context.epoch is not None:
        stamp.append((EPOCH_HEADER, str(context.epoch).encode()))
    await context.bus.send(topic, record.value, key=record.key, headers=(*kept, *stamp))
