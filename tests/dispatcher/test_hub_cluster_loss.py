"""A cluster is lost after `lost_after` seconds of silence the hub could hear: a bus the hub
cannot reach silences every cluster at once, and that must not re-dispatch their jobs, neither
during the outage nor right after it, before the workers are back."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from bus.base import TopicPartition
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.heartbeat_feed import HeartbeatFeedClock
from dispatcher.hub import Hub, HubConfig
from schemas.events import EventType, make_event
from schemas.status import JobPhase
from tests.helpers import cluster, jax_job, node, publish_heartbeat, publish_report, until
from trainhub.producer import submit_document

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_clock_leaves_out_the_stretches_it_could_not_hear() -> None:
    clock = HeartbeatFeedClock(T0, check_interval=0.5, keep=timedelta(seconds=60))
    for tick in range(1, 5):  # heard every half second up to 2 s
        clock.caught_up(at(tick / 2))
    assert clock.silence(at(0.5)) == 1.5
    clock.caught_up(at(12))  # then nothing could be read for 10 s
    assert clock.silence(at(0.5)) == 1.5
    clock.caught_up(at(12.5))
    assert clock.silence(at(0.5)) == 2.0
    assert clock.silence(at(11)) == 0.5  # observed during the outage: heard since its end
    assert clock.silence(at(13)) == 0.0
    assert clock.silence(None) == 0.0
    # Naive observation times are taken as UTC.
    assert clock.silence(at(12).replace(tzinfo=None)) == 0.5


async def test_an_outage_of_the_bus_loses_no_cluster_but_later_silence_does() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="loss")
    registry = CollectorRegistry()
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05, lost_after=2.0), registry=registry)
    await hub.start()
    feed = hub._consumers[2].subscription  # status, clusters, reports, jobs
    reachable = asyncio.Event()
    reachable.set()
    real_ends = feed.ends

    async def ends() -> dict[TopicPartition, int]:
        await reachable.wait()  # as a broker that does not answer
        return await real_ends()

    feed.ends = ends  # type: ignore[method-assign]

    def lost() -> float | None:
        return registry.get_sample_value("trainhub_clusters_lost_total")

    async def heartbeat(name: str) -> None:
        snapshot = cluster(name, node("n1", cpu="8", memory="16Gi"))
        event = make_event(EventType.CLUSTER_HEARTBEAT, f"worker/{name}", name, snapshot)
        await publish_report(bus, topics, name, name, event)

    try:
        await heartbeat("east")
        uid = await submit_document(bus, topics, jax_job("steady", workers=1))
        await until(lambda: (r := hub.ledger.get(uid)) is not None and r.cluster == "east")
        # The bus goes away for three times `lost_after`, and east has said nothing since.
        reachable.clear()
        await asyncio.sleep(6.0)
        record = hub.ledger.get(uid)
        assert record is not None and record.cluster == "east" and record.attempt == 1
        assert lost() == 0
        # Back: east gets the silence it was owed before the outage, not the outage itself.
        back = asyncio.get_running_loop().time()
        reachable.set()
        await asyncio.sleep(0.8)
        assert hub.ledger.get(uid).cluster == "east"  # type: ignore[union-attr]
        assert lost() == 0
        # A silence the hub does hear still loses the cluster, about `lost_after` after the
        # return (less what it heard before the outage).
        await until(lambda: hub.ledger.get(uid).phase == JobPhase.QUEUED, timeout=5)  # type: ignore[union-attr]
        assert lost() == 1
        assert asyncio.get_running_loop().time() - back < 3.0
    finally:
        await hub.stop()


async def test_a_silent_cluster_is_lost_without_waiting_for_the_next_scheduling_pass() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="loss-prompt")
    registry = CollectorRegistry()
    # A pass every 60 s: only the heartbeat feed's check can notice the silence in time.
    config = HubConfig(schedule_interval=60.0, lost_after=1.0)
    hub = Hub(bus, topics, config, registry=registry)
    await hub.start()
    try:
        await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="8", memory="16Gi")))
        await until(lambda: "east" in hub.lost_clusters, timeout=5)
        assert registry.get_sample_value("trainhub_clusters_lost_total") == 1
    finally:
        await hub.stop()
