"""The hub keeps its state on a compacted topic, a record per job: a restarted hub reads that
and the statuses since its predecessor's last commit, not the whole status history."""

from __future__ import annotations

import time

from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from dispatcher.ledger import JobRecord
from dispatcher.state_store import HubStateStore, decode_state, encode_state
from schemas.events import ClusterScore, EventType, JobStatusUpdate, PlacementDecision, make_event
from schemas.job_parsing import parse_job
from schemas.status import JobPhase, JobStatus
from tests.helpers import cluster, jax_job, node, publish_heartbeat, publish_report, until
from trainhub.producer import submit_document


def test_a_record_round_trips_through_its_state() -> None:
    document = jax_job("kept", workers=2)
    document["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 60
    record = JobRecord.of(parse_job(document), JobPhase.QUEUED)
    record.assign("east")
    record.submission, record.submitted_at = "event-1", 1234.5
    record.status = JobStatus()
    record.decision = PlacementDecision(
        chosen="east",
        clusters=[
            ClusterScore(name="east", feasible=True, score=0.7),
            ClusterScore(name="west", feasible=False, reason="full"),
        ],
    )
    record.exclude("west", time.time(), 300)
    back, ttl = decode_state(encode_state(record))
    assert (back.uid, back.phase, back.cluster, back.attempt) == (
        record.uid,
        JobPhase.ASSIGNED,
        "east",
        1,
    )
    assert back.job is not None and back.job.to_document() == record.document()
    assert (back.submission, back.submitted_at, back.queue, back.managed_by) == (
        "event-1",
        1234.5,
        record.queue,
        record.managed_by,
    )
    # Only the chosen cluster's score and the counts: the rest is on the status topic.
    assert back.decision == PlacementDecision(
        chosen="east",
        clusters=[ClusterScore(name="east", feasible=True, score=0.7)],
        considered=2,
        feasible=1,
        rejected={"full": 1},
    )
    assert back.avoided() == frozenset({"west"}) and ttl == 60
    # A finished job's state is its summary: no document, its TTL kept.
    record.finish(JobPhase.SUCCEEDED)
    finished, ttl = decode_state(encode_state(record))
    assert finished.job is None and finished.phase == JobPhase.SUCCEEDED and ttl == 60
    assert len(encode_state(record)) < 1024


async def test_the_store_keeps_the_newest_record_of_each_job_and_tombstones_remove() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="state-store")
    await bus.create_topics(topics.shared_specs())
    store = HubStateStore(bus, topics.hub_state)
    first = JobRecord.of(parse_job(jax_job("first")), JobPhase.QUEUED)
    second = JobRecord.of(parse_job(jax_job("second")), JobPhase.QUEUED)
    await store.save(first)
    await store.save(second)
    first.assign("east")
    await store.save(first)
    await store.forget(second.uid)
    await bus.publish(topics.hub_state, b"not a state", key=b"broken")
    loaded = {record.uid: record for record, _ in await store.load()}
    assert set(loaded) == {first.uid}
    assert loaded[first.uid].phase == JobPhase.ASSIGNED


async def test_a_restarted_hub_reads_its_state_and_only_the_statuses_since_the_last_commit() -> (
    None
):
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="state-restart")
    first = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await first.start()
    await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="64", memory="64Gi")))
    uids = [await submit_document(bus, topics, jax_job(f"job-{i}", workers=1)) for i in range(6)]
    await until(lambda: all((r := first.ledger.get(u)) and r.cluster == "east" for u in uids))
    for sequence, uid in enumerate(uids[:4], start=1):
        record = first.ledger.get(uid)
        assert record is not None
        done = JobStatusUpdate(
            uid=uid,
            phase=JobPhase.SUCCEEDED,
            cluster="east",
            attempt=record.attempt,
            sequence=sequence,
            reason="JAXJobSucceeded",
            message="done",
        )
        await publish_report(
            bus, topics, "east", uid, make_event(EventType.JOB_STATUS, "worker", uid, done)
        )
    await until(lambda: len(first.ledger.in_phase(JobPhase.SUCCEEDED)) == 4)
    await until(lambda: bus.committed(topics.hub_status_group) != {})
    await first.stop()
    history = len(bus.records(topics.status))

    second = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await second.start()
    try:
        states, statuses = second.rebuilt_from
        assert states == 6
        assert statuses < history  # the predecessor's committed statuses are not read again
        phases = {u: r.phase for u in uids if (r := second.ledger.get(u)) is not None}
        assert phases == {
            **{u: JobPhase.SUCCEEDED for u in uids[:4]},
            **{u: JobPhase.ASSIGNED for u in uids[4:]},
        }
        # The placed ones are still placed, with their documents, and new jobs are placed.
        placed = [second.ledger.get(u) for u in uids[4:]]
        assert all(r is not None and r.job is not None for r in placed)
        late = await submit_document(bus, topics, jax_job("late", workers=1))
        await until(lambda: (r := second.ledger.get(late)) is not None and r.cluster == "east")
    finally:
        await second.stop()


async def test_a_hub_without_state_rebuilds_from_the_status_history() -> None:
    # A deployment that predates the state topic: its history is all there is.
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="state-legacy")
    first = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await first.start()
    await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="64", memory="64Gi")))
    uid = await submit_document(bus, topics, jax_job("old", workers=1))
    await until(lambda: (r := first.ledger.get(uid)) is not None and r.cluster == "east")
    await first.stop()
    legacy = MemoryBus()
    await legacy.start()
    await legacy.create_topics(topics.shared_specs())
    for kept in bus.records(topics.status) + bus.records(topics.clusters):
        await legacy.publish(kept.topic, kept.value, key=kept.key, headers=kept.headers)
    second = Hub(legacy, topics, HubConfig(schedule_interval=0.05))
    await second.start()
    try:
        assert second.rebuilt_from[0] == 0
        record = second.ledger.get(uid)
        assert record is not None and record.phase == JobPhase.ASSIGNED
        # ... and writes the state it rebuilt, for the next start.
        await until(lambda: any(r.key == uid.encode() for r in legacy.records(topics.hub_state)))
    finally:
        await second.stop()
