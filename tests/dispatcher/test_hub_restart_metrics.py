"""A restarted hub reads its status and heartbeats again from the start: what it replays must
not pass for new events in its metrics (dead letters, lost clusters), and the job counters of
the jobs it rebuilt must start at 0 so that their first outcome shows in increase(). And what
it rebuilds is what it held: an invalid submission, never kept, takes no name after a restart
either, and a job taken from a cluster still avoids it for what is left of its window."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.events import EventType, JobHandedBack, make_event
from schemas.status import JobPhase
from tests.helpers import cluster, jax_job, node, publish_heartbeat, publish_report, until
from trainhub.producer import submit_document


def _hub(bus: MemoryBus, topics: Topics, registry: CollectorRegistry, **config: Any) -> Hub:
    return Hub(bus, topics, HubConfig(schedule_interval=0.05, **config), registry=registry)


async def test_bad_records_met_again_in_the_replay_are_not_dead_lettered_twice() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="replay-dlq")
    first_registry = CollectorRegistry()
    first = _hub(bus, topics, first_registry)
    await first.start()
    await bus.publish(topics.status, b"{not json", key=b"a")
    await bus.publish(topics.clusters, b"\xff\xfe", key=b"east")
    await until(lambda: len(bus.records(topics.dead_letters)) == 2)
    assert first_registry.get_sample_value("trainhub_dead_letters_total", {"component": "hub"}) == 2
    await first.stop()
    # One more while no hub runs: that one is new to the next hub.
    await bus.publish(topics.status, b"also not json", key=b"b")

    registry = CollectorRegistry()
    second = _hub(bus, topics, registry)
    await second.start()
    try:
        copies = [r.value for r in bus.records(topics.dead_letters)]
        assert copies == [b"{not json", b"\xff\xfe", b"also not json"]
        assert registry.get_sample_value("trainhub_dead_letters_total", {"component": "hub"}) == 1
        # Live, a bad record is set aside as always, even one equal to an old one.
        await bus.publish(topics.status, b"{not json", key=b"a")
        await until(lambda: len(bus.records(topics.dead_letters)) == 4)
    finally:
        await second.stop()


async def test_a_cluster_silent_since_before_the_hub_started_is_lost_but_not_counted() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="replay-lost")
    await bus.create_topics(topics.shared_specs())
    long_ago = datetime.now(UTC) - timedelta(minutes=10)
    await publish_heartbeat(
        bus, topics, cluster("east", node("n1", cpu="8", memory="16Gi"), observedAt=long_ago)
    )
    registry = CollectorRegistry()
    hub = _hub(bus, topics, registry, lost_after=1.0)

    def lost_gauge(name: str) -> float | None:
        return registry.get_sample_value("trainhub_cluster_lost", {"cluster": name})

    await hub.start()
    try:
        # Owed lost_after from the start, as a worker still reconnecting would be.
        assert "east" not in hub.lost_clusters and lost_gauge("east") == 0
        await until(lambda: "east" in hub.lost_clusters, timeout=5)
        assert lost_gauge("east") == 1
        assert registry.get_sample_value("trainhub_clusters_lost_total") == 0
        # A cluster the hub heard go silent is counted.
        await publish_heartbeat(bus, topics, cluster("west", node("n1", cpu="8", memory="16Gi")))
        await until(lambda: "west" in hub.lost_clusters, timeout=5)
        assert registry.get_sample_value("trainhub_clusters_lost_total") == 1
        # Back: no longer lost.
        await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="8", memory="16Gi")))
        await until(lambda: lost_gauge("east") == 0, timeout=5)
    finally:
        await hub.stop()


async def test_a_rebuilt_job_has_its_counters_at_zero_before_its_first_outcome() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="replay-counters")
    await bus.create_topics(topics.shared_specs())
    await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="8", memory="16Gi")))
    first = _hub(bus, topics, CollectorRegistry())
    await first.start()
    uid = await submit_document(bus, topics, jax_job("kept", workers=1))
    await until(lambda: first.ledger.count(JobPhase.ASSIGNED) == 1)
    await first.stop()

    registry = CollectorRegistry()
    second = _hub(bus, topics, registry)
    await second.start()
    try:
        assert second.ledger.get(uid) is not None
        labels = {"job_namespace": "default", "framework": "jax"}
        for what in ("created", "successful", "failed", "restarted", "deleted"):
            value = registry.get_sample_value(f"training_operator_jobs_{what}_total", labels)
            assert value == 0, what
    finally:
        await second.stop()


async def test_an_invalid_job_holds_no_name_after_a_restart_either() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="replay-invalid")
    await bus.create_topics(topics.shared_specs())
    await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="8", memory="16Gi")))
    first = _hub(bus, topics, CollectorRegistry())
    await first.start()
    broken = jax_job("typo")
    broken["spec"]["runPolicyy"] = {}
    uid = await submit_document(bus, topics, broken)
    await until(lambda: len(bus.records(topics.dead_letters)) == 1)
    assert first.ledger.get(uid) is None
    await first.stop()

    second = _hub(bus, topics, CollectorRegistry())
    await second.start()
    try:
        assert second.ledger.get(uid) is None
        await submit_document(bus, topics, jax_job("typo"))
        await until(lambda: (r := second.ledger.get(uid)) is not None and r.phase in _PLACED)
    finally:
        await second.stop()


async def test_a_restarted_hub_keeps_a_job_off_the_cluster_that_handed_it_back() -> None:
    # ... for what is left of its exclusion window, counted from the re-dispatch.
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="replay-excluded")
    await bus.create_topics(topics.shared_specs())
    await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="8", memory="16Gi")))
    first = _hub(bus, topics, CollectorRegistry(), exclusion_seconds=2.0)
    await first.start()
    uid = await submit_document(bus, topics, jax_job("picky", workers=1))
    await until(lambda: (r := first.ledger.get(uid)) is not None and r.cluster == "east")
    back = JobHandedBack(uid=uid, cluster="east", attempt=1, reason="pods unschedulable for 60s")
    event = make_event(EventType.JOB_HANDED_BACK, "trainhub/worker/east", uid, back)
    await publish_report(bus, topics, "east", uid, event)
    await until(lambda: (r := first.ledger.get(uid)) is not None and r.phase == JobPhase.QUEUED)
    window_ends = time.monotonic() + 2.0  # at the latest: counted from the re-dispatch
    await first.stop()

    second = _hub(bus, topics, CollectorRegistry(), exclusion_seconds=2.0)
    await second.start()
    try:
        record = second.ledger.get(uid)
        assert record is not None and record.phase == JobPhase.QUEUED
        assert record.avoided() == frozenset({"east"})
        assert record.excluded["east"] <= window_ends + 0.1  # not a new window from the restart
        await asyncio.sleep(0.3)  # several scheduling passes: east is the only cluster
        assert record.phase == JobPhase.QUEUED and record.cluster is None
        # Once the window is over, east may have it again.
        await until(lambda: record.cluster == "east", timeout=10)
        assert record.attempt == 2
    finally:
        await second.stop()


_PLACED = (JobPhase.QUEUED, JobPhase.ASSIGNED)
