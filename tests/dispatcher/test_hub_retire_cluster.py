"""An operator retires a member cluster whose worker is gone for good (`trainhub
retire-cluster`): the hub forgets it, also after a restart, moves its jobs elsewhere at once,
and stops exporting its series (so the lost-cluster alerts end); a later heartbeat brings it
back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from bus.events import publish_event
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.cluster import ClusterSnapshot
from schemas.events import ClusterRetired, EventType, make_event
from schemas.status import JobPhase
from tests.helpers import cluster, jax_job, node, publish_heartbeat, until
from trainhub.producer import ClusterStillReporting, read_clusters, retire_cluster, submit_document


async def test_a_retired_cluster_is_forgotten_and_its_jobs_move() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="retire")
    # Stale after 30 s, but lost only after 10 minutes: the retirement moves the job, not a loss.
    config = HubConfig(schedule_interval=0.05, max_heartbeat_age=30.0, lost_after=600.0)
    registry = CollectorRegistry()
    hub = Hub(bus, topics, config, registry=registry)
    await hub.start()
    hubs = [hub]

    def east(sequence: int, seconds_ago: float) -> ClusterSnapshot:
        observed = datetime.now(UTC) - timedelta(seconds=seconds_ago)
        return cluster(
            "east", node("n1", cpu="8", memory="16Gi"), sequence=sequence, observedAt=observed
        )

    try:
        await publish_heartbeat(bus, topics, east(1, 0))
        uid = await submit_document(bus, topics, jax_job("moves", workers=1))
        await until(lambda: (r := hub.ledger.get(uid)) is not None and r.cluster == "east")
        await publish_heartbeat(bus, topics, cluster("west", node("n1", cpu="8", memory="16Gi")))
        await until(lambda: hub.clusters.get("west") is not None)

        with pytest.raises(KeyError, match=r"no cluster named 'north'.*known: east, west"):
            await retire_cluster(bus, topics, "north", max_age=30.0)
        with pytest.raises(ClusterStillReporting, match="stop its worker first"):
            await retire_cluster(bus, topics, "east", max_age=30.0)

        # east's worker is gone: its last heartbeat is 45 s old.
        await publish_heartbeat(bus, topics, east(2, 45))
        await until(lambda: (c := hub.clusters.get("east")) is not None and c.sequence == 2)
        age = registry.get_sample_value(
            "trainhub_cluster_heartbeat_age_seconds", {"cluster": "east"}
        )
        assert age is not None and age >= 45
        await retire_cluster(bus, topics, "east", max_age=30.0, reason="decommissioned")

        def moved() -> bool:
            record = hub.ledger.get(uid)
            return record is not None and record.cluster == "west" and record.attempt == 2

        await until(moved)
        assert [c.name for c in hub.clusters.all()] == ["west"]
        for series in ("trainhub_cluster_heartbeat_age_seconds", "trainhub_cluster_healthy"):
            assert registry.get_sample_value(series, {"cluster": "east"}) is None
        assert sorted(await read_clusters(bus, topics)) == ["west"]

        # A restarted hub replays the clusters topic: east stays retired.
        await hub.stop()
        hub = Hub(bus, topics, config, registry=CollectorRegistry())
        hubs.append(hub)
        await hub.start()
        assert [c.name for c in hub.clusters.all()] == ["west"]
        record = hub.ledger.get(uid)
        assert record is not None and record.cluster == "west" and record.attempt == 2
        assert record.phase != JobPhase.QUEUED

        # Its worker reports again: the cluster is back.
        await publish_heartbeat(bus, topics, east(3, 0))
        await until(lambda: hub.clusters.get("east") is not None)
        assert sorted(await read_clusters(bus, topics)) == ["east", "west"]
    finally:
        for running in hubs:
            await running.stop()
        await bus.close()


async def test_a_restarted_hub_moves_the_jobs_of_a_cluster_compaction_left_only_retired() -> None:
    # The hub died after the retirement was written, before it moved the job; compaction
    # then replaced east's heartbeats by the retirement. The next hub never hears of east
    # as a cluster, but its job (placed there, by the statuses) still moves.
    first = MemoryBus()
    await first.start()
    topics = Topics(prefix="compacted")
    config = HubConfig(schedule_interval=0.05, lost_after=600.0)
    hub = Hub(first, topics, config, registry=CollectorRegistry())
    await hub.start()
    try:
        await publish_heartbeat(first, topics, cluster("east", node("n1", cpu="8", memory="16Gi")))
        uid = await submit_document(first, topics, jax_job("stranded", workers=1))
        await until(lambda: (r := hub.ledger.get(uid)) is not None and r.cluster == "east")
    finally:
        await hub.stop()
    second = MemoryBus()  # the topics as compaction leaves them
    await second.start()
    await second.create_topics(topics.shared_specs())
    for topic in (topics.jobs, topics.status):
        for message in first.records(topic):
            await second.publish(
                topic, message.value or b"", key=message.key, headers=message.headers
            )
    await publish_heartbeat(second, topics, cluster("west", node("n1", cpu="8", memory="16Gi")))
    retired = ClusterRetired(name="east", reason="decommissioned")
    event = make_event(EventType.CLUSTER_RETIRED, "trainhub/cli", "east", retired)
    await publish_event(second, topics.clusters, "east", event)
    hub = Hub(second, topics, config, registry=CollectorRegistry())
    await hub.start()
    try:
        await until(lambda: (r := hub.ledger.get(uid)) is not None and r.cluster == "west")
        record = hub.ledger.get(uid)
        assert record is not None and record.attempt == 2
        assert [c.name for c in hub.clusters.all()] == ["west"]
    finally:
        await hub.stop()
        await first.close()
        await second.close()
