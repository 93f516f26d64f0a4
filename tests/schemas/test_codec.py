"""CloudEvents binary mode: attributes in ce_* headers, data as the JSON body."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from pydantic import BaseModel

from schemas.cluster import ClusterSnapshot, NodeSnapshot
from schemas.codec import decode_event, encode_event, encode_payload
from schemas.errors import EventDecodeError
from schemas.events import (
    CloudEvent,
    ClusterScore,
    EventType,
    JobAssigned,
    JobRef,
    JobRevoked,
    JobStatusUpdate,
    PlacementDecision,
    make_event,
    new_event_id,
)
from schemas.status import JobCondition, JobPhase, JobStatus, ReplicaStatus


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


def _payloads() -> list[tuple[str, BaseModel]]:
    at = datetime(2026, 12, 1, 10, 30, 5, 250000, tzinfo=UTC)
    status = JobStatus(
        conditions=[JobCondition(type="Running", status="True", lastTransitionTime=at)],
        replicaStatuses={"Worker": ReplicaStatus(active=2)},
        startTime=at,
    )
    decision = PlacementDecision(
        chosen="east",
        clusters=[
            ClusterScore(name="east", feasible=True, score=71.125),
            ClusterScore(name="west", feasible=False, reason="not enough cpu: é ✓"),
        ],
    )
    node = NodeSnapshot(
        name="n1",
        allocatable={"cpu": Decimal("7.5"), "memory": Decimal(64 * 2**30)},
        requested={"cpu": Decimal("0.25")},
        labels={"zone": "a"},
    )
    return [
        (
            EventType.JOB_STATUS,
            JobStatusUpdate(
                uid="u1",
                phase=JobPhase.RUNNING,
                cluster="east",
                attempt=2,
                sequence=7,
                message='quotes " and \\ and\nnewlines',
                status=status,
                placement=decision,
                job={"kind": "JAXJob", "spec": {"n": [1, 2.5, None, True]}},
            ),
        ),
        (EventType.JOB_ASSIGNED, JobAssigned(uid="u1", cluster="east", attempt=1, job={})),
        (EventType.JOB_REVOKED, JobRevoked(uid="u1", cluster="east", attempt=1, reason="lost")),
        (EventType.JOB_SUSPENDED, JobRef(uid="u1")),
        (EventType.CLUSTER_HEARTBEAT, ClusterSnapshot(name="east", nodes=[node], observedAt=at)),
    ]


@pytest.mark.parametrize(("event_type", "payload"), _payloads())
def test_encoding_a_payload_directly_matches_encoding_its_envelope(
    event_type: str, payload: BaseModel
) -> None:
    headers, body = encode_payload(event_type, "hub/test", "u1", payload)
    expected_headers, expected_body = encode_event(
        make_event(event_type, "hub/test", "u1", payload)
    )
    assert body == expected_body
    assert [k for k, _ in headers] == [k for k, _ in expected_headers]
    varying = {"ce_id", "ce_time"}
    assert [h for h in headers if h[0] not in varying] == [
        h for h in expected_headers if h[0] not in varying
    ]
    event = decode_event(headers, body)
    assert event.type == event_type and event.subject == "u1" and event.source == "hub/test"
    assert abs((event.time - datetime.now(UTC)).total_seconds()) < 60
    assert type(payload).model_validate(event.data) == payload


@pytest.mark.parametrize(
    ("event_type", "source", "subject"),
    [
        ("com.example.job", "hub", "u1"),
        ("io.trainhub.Job", "hub", "u1"),
        (EventType.JOB_STATUS, "", "u1"),
        (EventType.JOB_STATUS, "h" * 257, "u1"),
        (EventType.JOB_STATUS, "hub", "u" * 257),
    ],
)
def test_a_payload_with_attributes_the_envelope_refuses_is_not_encoded(
    event_type: str, source: str, subject: str
) -> None:
    with pytest.raises(ValueError, match="invalid CloudEvent attributes"):
        encode_payload(event_type, source, subject, JobRef(uid="u1"))
    with pytest.raises(ValueError):
        make_event(event_type, source, subject, JobRef(uid="u1"))
