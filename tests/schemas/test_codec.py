"""CloudEvents binary mode: attributes in ce_* headers, data as the JSON body."""

from __future__ import annotations

import os
import uuid

import pytest

from schemas.codec import decode_event, encode_event
from schemas.errors import EventDecodeError
from schemas.events import CloudEvent, EventType, JobRef, make_event, new_event_id


def test_round_trip_keeps_every_attribute() -> None:
    event = make_event(EventType.JOB_DELETED, "test", "uid-1", JobRef(uid="uid-1"))
    headers, body = encode_event(event)
    names = {k for k, _ in headers}
    assert {"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_subject", "ce_time"} <= names
    assert decode_event(headers, body) == event


@pytest.mark.parametrize(
    ("headers", "body", "reason"),
    [
        ([], b"{}", "missing CloudEvents headers"),
        (None, b"not json", "body is not JSON"),
        (None, b"[1, 2]", "must be a JSON object"),
        (None, None, "no body"),
        ([("ce_specversion", b"\xff")], b"{}", "not UTF-8"),
    ],
)
def test_bad_records_say_why(
    headers: list[tuple[str, bytes]] | None, body: bytes | None, reason: str
) -> None:
    if headers is None:
        headers, _ = encode_event(make_event(EventType.JOB_DELETED, "t", "u", {"uid": "u"}))
    with pytest.raises(EventDecodeError, match=reason):
        decode_event(headers, body)


def test_foreign_event_type_is_refused() -> None:
    headers, body = encode_event(make_event(EventType.JOB_DELETED, "t", "u", {"uid": "u"}))
    headers = [(k, b"com.example.other" if k == "ce_type" else v) for k, v in headers]
    with pytest.raises(EventDecodeError, match="type"):
        decode_event(headers, body)


def test_event_ids_are_version_4_uuids_unique_and_not_shared_with_a_forked_child() -> None:
    ids = [new_event_id() for _ in range(100_000)]
    assert len(set(ids)) == len(ids)
    for text in ids[:1000]:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, text)
    assert CloudEvent(type=EventType.JOB_STATUS, source="test").id != ids[-1]
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report its next id and leave at once
        os.write(writing, new_event_id().encode())
        os._exit(0)
    os.close(writing)
    os.waitpid(child, 0)
    from_child = os.read(reading, 64).decode()
    os.close(reading)
    # Without reseeding, the child would repeat the parent's next id.
    assert uuid.UUID(from_child).version == 4
    assert from_child != new_event_id()
