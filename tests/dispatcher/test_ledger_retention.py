"""A finished job leaves the hub's ledger once its retention ran out: a hub that runs for
months holds the jobs of that window, not every job it ever saw."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from dispatcher.ledger import JobRecord, Ledger
from schemas.events import EventType, JobStatusUpdate, make_event
from schemas.job_parsing import parse_job
from schemas.status import JobPhase, JobStatus
from tests.helpers import cluster, jax_job, node, publish_heartbeat, publish_report, until
from trainhub.producer import submit_document


def _record(uid: str, phase: JobPhase) -> JobRecord:
    record = JobRecord.of(parse_job(jax_job(uid)), phase)
    record.uid = uid
    return record


def test_finished_records_are_forgotten_once_their_retention_ran_out() -> None:
    ledger = Ledger()
    done, running, ended_long_ago = (_record(u, JobPhase.RUNNING) for u in "abc")
    for record in (done, running, ended_long_ago):
        ledger.put(record)
    done.finish(JobPhase.SUCCEEDED)
    ended_long_ago.status = JobStatus(completionTime=datetime.now(UTC) - timedelta(hours=2))
    ended_long_ago.finish(JobPhase.FAILED)
    assert ledger.compact_finished(retention=3600) == 2
    now = time.time()
    # Retention counts from the job's completion when it is known.
    assert ledger.forget_expired(now) == [ended_long_ago]
    assert ledger.get("c") is None and ledger.in_phase(JobPhase.FAILED) == []
    assert ledger.get("a") is done and ledger.get("b") is running
    assert ledger.forget_expired(now + 3599) == []
    assert ledger.forget_expired(now + 3601) == [done]
    assert ledger.get("a") is None and ledger.in_phase(JobPhase.SUCCEEDED) == []
    assert ledger.get("b") is running and len(ledger.all()) == 1


def test_a_record_replaced_or_queued_again_before_its_retention_ran_out_is_kept() -> None:
    ledger = Ledger()
    replaced, requeued = _record("r", JobPhase.RUNNING), _record("q", JobPhase.RUNNING)
    for record in (replaced, requeued):
        ledger.put(record)
        record.finish(JobPhase.DELETED)
    ledger.compact_finished(retention=10)
    successor = _record("r", JobPhase.QUEUED)  # the same job submitted again
    ledger.put(successor)
    requeued.enqueue()
    assert ledger.forget_expired(time.time() + 11) == []
    assert ledger.get("r") is successor and ledger.get("q") is requeued


def test_without_a_retention_finished_records_stay() -> None:
    ledger = Ledger()
    record = _record("a", JobPhase.RUNNING)
    ledger.put(record)
    record.finish(JobPhase.SUCCEEDED)
    ledger.compact_finished()
    assert ledger.forget_expired(time.time() + 10**9) == []
    assert ledger.get("a") is record


async def test_the_hub_forgets_a_finished_job_and_takes_its_name_again_as_new() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="retention")
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05, finished_retention=0.2))
    await hub.start()
    try:
        await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="8", memory="8Gi")))
        uid = await submit_document(bus, topics, jax_job("short", workers=1))
        await until(lambda: (r := hub.ledger.get(uid)) is not None and r.cluster == "east")
        record = hub.ledger.get(uid)
        assert record is not None
        done = JobStatusUpdate(
            uid=uid,
            phase=JobPhase.SUCCEEDED,
            cluster="east",
            attempt=record.attempt,
            sequence=3,
            reason="JAXJobSucceeded",
            message="done",
        )
        await publish_report(
            bus, topics, "east", uid, make_event(EventType.JOB_STATUS, "worker", uid, done)
        )
        await until(lambda: hub.ledger.get(uid) is None, timeout=5)
        # Its name is free: the same document is a new job, not a refused duplicate.
        again = await submit_document(bus, topics, jax_job("short", workers=1))
        assert again == uid
        await until(lambda: (r := hub.ledger.get(uid)) is not None and r.cluster == "east")
    finally:
        await hub.stop()
