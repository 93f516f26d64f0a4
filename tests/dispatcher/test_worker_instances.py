"""Two worker processes reporting one cluster name are caught; a worker's restart is not."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest

from bus.events import events_to_end
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from dispatcher.registry import ClusterRegistry
from dispatcher.worker_instances import InstanceWatch
from schemas.cluster import ClusterSnapshot
from schemas.events import JobStatusUpdate
from schemas.status import JobPhase
from tests.helpers import cluster, jax_job, node, publish_heartbeat, publish_passed_on, until
from trainhub.cli_jobs import cluster_row
from trainhub.producer import read_clusters, submit_document

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_restart_replaces_an_instance_and_two_processes_take_turns() -> None:
    watch = InstanceWatch(window=30)
    for second, instance in [(0, "a"), (5, "a"), (6, "b"), (11, "b"), (16, "b")]:
        watch.observe("east", instance, _at(second))
    assert watch.conflict("east", _at(16)) is None  # a restarted as b

    watch.observe("east", "a", _at(17))  # a was replaced 11 s ago and reports again
    reason = watch.conflict("east", _at(17))
    assert reason is not None and "instances a and b" in reason
    assert watch.conflict("west", _at(17)) is None
    # Only a from now on: the conflict ends a window after the last turn.
    for second in range(20, 50, 5):
        watch.observe("east", "a", _at(second))
    assert watch.conflict("east", _at(45)) is not None
    assert watch.conflict("east", _at(48)) is None


def test_an_instance_back_after_the_window_is_a_restart_too() -> None:
    watch = InstanceWatch(window=30)
    watch.observe("east", "a", _at(0))
    watch.observe("east", "b", _at(10))
    watch.observe("east", "a", _at(45))  # a's last report is 45 s old: long forgotten
    assert watch.conflict("east", _at(45)) is None
    watch.observe("east", None, _at(46))  # workers from before instances: no opinion
    assert watch.conflict("east", _at(46)) is None


def test_the_registry_keeps_a_contested_cluster_unhealthy_with_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = ClusterRegistry(max_heartbeat_age=30)
    free = node("n1", cpu="8", memory="32Gi", pods="110")
    caplog.set_level(logging.WARNING, logger="dispatcher.registry")
    for second, instance in [(0, "a"), (1, "b"), (2, "a"), (3, "b")]:
        registry.update(cluster("east", free, instance=instance, observedAt=_at(second)))
    kept = registry.get("east")
    assert kept is not None and not kept.healthy
    assert "two worker processes" in (kept.unhealthyReason or "")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "not placing on east" in errors[0].getMessage()
    registry.update(cluster("east", free, instance="b", observedAt=_at(40)))
    kept = registry.get("east")
    assert kept is not None and kept.healthy and kept.unhealthyReason is None
    assert any("placing there again" in r.getMessage() for r in caplog.records)


async def test_the_hub_places_nothing_on_a_name_two_workers_report() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="twins")
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05, max_heartbeat_age=2, lost_after=60))
    await hub.start()
    free = node("n1", cpu="8", memory="32Gi", pods="110")
    try:
        for instance in ("a", "b", "a"):
            now = datetime.now(UTC)
            await publish_heartbeat(
                bus, topics, cluster("east", free, instance=instance, observedAt=now)
            )
        uid = await submit_document(bus, topics, jax_job("twin"))
        await until(lambda: (r := hub.ledger.get(uid)) is not None and r.reason != "Queued")
        record = hub.ledger.get(uid)
        assert record is not None and record.phase == JobPhase.QUEUED
        assert "two worker processes report this cluster" in (record.message or "")
        # The duplicate goes away: once a reports alone for the window, the job is placed.
        async with asyncio.timeout(10):
            while record.phase == JobPhase.QUEUED:
                now = datetime.now(UTC)
                await publish_heartbeat(
                    bus, topics, cluster("east", free, instance="a", observedAt=now)
                )
                await asyncio.sleep(0.2)
        assert record.phase == JobPhase.ASSIGNED and record.cluster == "east"
        await bus.flush()
    finally:
        await hub.stop()
    statuses = [e.data_as(JobStatusUpdate) async for e in events_to_end(bus, topics.status)]
    waiting = [u for u in statuses if u.uid == uid and u.reason == "WaitingForCluster"]
    assert waiting and "instances a and b" in (waiting[0].message or "")


async def test_clusters_as_read_by_users_show_the_conflict_too() -> None:
    # `trainhub get clusters` and the SDK read the heartbeats the hub passed on themselves,
    # not the hub's view of them.
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="twins-read")
    await bus.create_topics(topics.shared_specs())
    free = node("n1", cpu="8", memory="32Gi", pods="110")

    async def passed_on(snapshot: ClusterSnapshot) -> None:
        await publish_passed_on(bus, topics, snapshot)

    for second, instance in [(0, "a"), (1, "b"), (2, "a")]:
        await passed_on(cluster("east", free, instance=instance, observedAt=_at(second)))
    for second, instance in [(0, "c"), (5, "d"), (10, "d")]:  # west: a restart
        await passed_on(cluster("west", free, instance=instance, observedAt=_at(second)))
    clusters = await read_clusters(bus, topics, window=30)
    assert not clusters["east"].healthy
    assert "instances a and b" in (clusters["east"].unhealthyReason or "")
    assert clusters["west"].healthy and clusters["west"].unhealthyReason is None
    assert cluster_row(clusters["east"], max_age=1e9)["unhealthyReason"] is not None


async def test_a_starting_hub_reports_only_the_conflicts_that_still_hold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The clusters topic's uncompacted tail keeps old heartbeats: a conflict that ended an
    # hour ago is history, one from the last seconds is news.
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="twins-replay")
    await bus.create_topics(topics.shared_specs())
    free = node("n1", cpu="8", memory="32Gi", pods="110")
    now = datetime.now(UTC)
    hour_ago = now - timedelta(hours=1)
    east = [(hour_ago, "a"), (hour_ago + timedelta(seconds=5), "b")]
    east += [(hour_ago + timedelta(seconds=10), "a"), (now - timedelta(seconds=2), "a")]
    west = [(now - timedelta(seconds=3), "c"), (now - timedelta(seconds=2), "d")]
    west += [(now - timedelta(seconds=1), "c")]
    for name, reports in (("east", east), ("west", west)):
        for at, instance in reports:
            await publish_heartbeat(
                bus, topics, cluster(name, free, instance=instance, observedAt=at)
            )
    caplog.set_level(logging.WARNING, logger="dispatcher.registry")
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05, max_heartbeat_age=30))
    await hub.start()
    try:
        messages = [r.getMessage() for r in caplog.records]
        assert [m for m in messages if "east" in m] == []
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and errors[0].startswith("not placing on west")
        east_now = hub.clusters.get("east")
        assert east_now is not None and east_now.healthy
        west_now = hub.clusters.get("west")
        assert west_now is not None and not west_now.healthy
        # Live heartbeats: east reports alone as before; nothing to say about it.
        await publish_heartbeat(
            bus, topics, cluster("east", free, instance="a", observedAt=datetime.now(UTC))
        )
        await until(
            lambda: (
                (c := hub.clusters.get("east")) is not None
                and c.observedAt is not None
                and c.observedAt > now
            )
        )
        assert [r.getMessage() for r in caplog.records if "east" in r.getMessage()] == []
    finally:
        await hub.stop()
