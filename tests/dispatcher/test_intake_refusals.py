"""Control events on the jobs topic that the hub cannot act on are dead-lettered with the
reason, never dropped in silence."""

from __future__ import annotations

import logging
import uuid

import pytest

from bus.dead_letters import dead_letter_reason
from bus.events import publish_event
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.events import EventType, JobRef, make_event
from schemas.status import JobPhase
from tests.helpers import jax_job, until
from trainhub.producer import request, submit_document


async def _reasons(bus: MemoryBus, topics: Topics, count: int) -> list[str]:
    await until(lambda: len(bus.records(topics.dead_letters)) >= count)
    return [dead_letter_reason(r) or "" for r in bus.records(topics.dead_letters)]


@pytest.mark.parametrize(
    ("event_type", "verb"),
    [
        (EventType.JOB_DELETED, "delete"),
        (EventType.JOB_SUSPENDED, "suspend"),
        (EventType.JOB_RESUMED, "resume"),
    ],
)
async def test_a_request_for_an_unknown_uid_is_dead_lettered_and_logged(
    event_type: str, verb: str, caplog: pytest.LogCaptureFixture
) -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix=f"t{uuid.uuid4().hex[:8]}")
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await hub.start()
    try:
        with caplog.at_level(logging.WARNING):
            await request(bus, topics, event_type, "no-such-job")
            [reason] = await _reasons(bus, topics, 1)
        assert f"invalid {event_type}: no job with uid 'no-such-job'" in reason
        assert f"no such job to {verb}" in reason
        assert any(f"{verb} request for an unknown job" in r.message for r in caplog.records)
        # A known job's request still works, after the refused one.
        uid = await submit_document(bus, topics, jax_job("known"))
        await until(lambda: hub.ledger.get(uid) is not None)
        await request(bus, topics, EventType.JOB_DELETED, uid)
        await until(lambda: hub.ledger.get(uid).phase == JobPhase.DELETED)  # type: ignore[union-attr]
        assert len(bus.records(topics.dead_letters)) == 1
    finally:
        await hub.stop()


async def test_unknown_types_and_undecodable_records_are_dead_lettered_with_the_reason() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix=f"t{uuid.uuid4().hex[:8]}")
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await hub.start()
    try:
        odd = make_event("io.trainhub.job.restarted", "test", "u1", JobRef(uid="u1"))
        await publish_event(bus, topics.jobs, "u1", odd)
        await bus.publish(topics.jobs, b'{"uid": "u1"}', key=b"u1", headers=())
        wrong_body = make_event(EventType.JOB_DELETED, "test", "u1", {"name": "u1"})
        await publish_event(bus, topics.jobs, "u1", wrong_body)
        first, second, third = await _reasons(bus, topics, 3)
        assert "unknown event type 'io.trainhub.job.restarted' on the jobs topic" in first
        assert "io.trainhub.job.submitted" in first  # the types it takes are listed
        assert second.startswith("undecodable: missing CloudEvents headers: ce_specversion")
        assert third.startswith(f"invalid {EventType.JOB_DELETED}:") and "uid" in third
    finally:
        await hub.stop()
