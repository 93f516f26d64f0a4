"""Failover in the embedded system: lost clusters and hand-backs move jobs elsewhere."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from schemas.events import EventType, JobHandedBack, JobStatusUpdate, make_event
from schemas.status import JobPhase
from tests.helpers import jax_job, publish_report
from trainhub.embedded import Embedded, EmbeddedOptions, make_backend
from workers.cluster_spec import parse_cluster_spec
from workers.worker import Worker, WorkerConfig


def _options() -> EmbeddedOptions:
    return EmbeddedOptions(
        clusters=[
            parse_cluster_spec("east:cpu=4,memory=8Gi"),
            parse_cluster_spec("west:cpu=4,memory=8Gi"),
        ],
        backend="sim",
        heartbeat_interval=0.2,
        max_heartbeat_age=1.5,
    )


async def _placed_on(system: Embedded, uid: str) -> str:
    for _ in range(200):
        record = system.hub.ledger.get(uid)
        if record is not None and record.cluster and record.phase == JobPhase.RUNNING:
            return record.cluster
        await asyncio.sleep(0.05)
    raise AssertionError("the job never ran")


async def test_lost_cluster_jobs_are_redispatched_and_old_status_ignored() -> None:
    async with Embedded(_options()) as system:
        uid = await system.submit(jax_job("long", workers=2, duration="3s"))
        first = await _placed_on(system, uid)
        lost = system.worker(first)
        # The cluster goes silent without a goodbye (as a real cluster whose pods outlive
        # the worker would): no hand-back, the hub must notice within max_heartbeat_age.
        lost.backend.keeps_pods = True
        await lost.stop()
        updates: list[JobStatusUpdate] = []
        final = await system.wait_finished([uid], updates.append, timeout=30)
        assert final[uid].phase == JobPhase.SUCCEEDED
        assert final[uid].cluster != first
        assert final[uid].attempt == 2
        redispatched = [u for u in updates if u.reason == "Redispatched"]
        assert redispatched and f"cluster {first} lost" in (redispatched[0].message or "")
        # A late status from the lost cluster's attempt must not change the ledger.
        stale = JobStatusUpdate(
            uid=uid, phase=JobPhase.FAILED, cluster=first, attempt=1, sequence=99
        )
        event = make_event(EventType.JOB_STATUS, f"trainhub/worker/{first}", uid, stale)
        await publish_report(system.bus, system.topics, first, uid, event)
        await asyncio.sleep(0.3)
        record = system.hub.ledger.get(uid)
        assert record is not None and record.phase == JobPhase.SUCCEEDED
        assert system.hub.metrics.redispatches._value.get() == 1


async def test_handed_back_job_is_placed_on_another_cluster() -> None:
    async with Embedded(_options()) as system:
        uid = await system.submit(jax_job("picky", workers=1, duration="5s"))
        first = await _placed_on(system, uid)
        back = JobHandedBack(uid=uid, cluster=first, attempt=1, reason="pods unschedulable for 60s")
        event = make_event(EventType.JOB_HANDED_BACK, f"trainhub/worker/{first}", uid, back)
        await publish_report(system.bus, system.topics, first, uid, event)
        second = None
        for _ in range(200):
            record = system.hub.ledger.get(uid)
            if record is not None and record.attempt == 2 and record.cluster:
                second = record.cluster
                break
            await asyncio.sleep(0.05)
        assert second is not None and second != first
        assert system.hub.ledger.get(uid).avoided() == frozenset({first})  # type: ignore[union-attr]


async def test_worker_hands_back_a_job_its_cluster_cannot_schedule() -> None:
    options = _options()
    options.clusters = [
        parse_cluster_spec("east:cpu=8,memory=16Gi"),
        parse_cluster_spec("west:cpu=4,memory=8Gi"),
    ]
    options.heartbeat_interval = 30.0  # the hub keeps believing east is empty
    options.max_heartbeat_age = 120.0
    async with Embedded(options) as system:
        east = system.worker("east")
        east.config.unschedulable_timeout = 0.5
        backend = east.backend
        from decimal import Decimal

        # Another tenant fills east without the hub hearing of it.
        backend.pool.bind("other/tenant", {"cpu": Decimal(8)}, {})  # type: ignore[attr-defined]
        uid = await system.submit(jax_job("stuck", workers=1, cpu="2", duration="0.3s"))
        updates: list[JobStatusUpdate] = []
        final = await system.wait_finished([uid], updates.append, timeout=30)
        assert final[uid].phase == JobPhase.SUCCEEDED
        assert final[uid].cluster == "west"
        assert any(u.reason == "Unschedulable" and u.cluster == "east" for u in updates)
        redispatched = [u for u in updates if u.reason == "Redispatched"]
        assert redispatched and "handed back by east: pods unschedulable" in (
            redispatched[0].message or ""
        )
        assert uid not in east.runs


async def test_a_restarted_worker_runs_again_the_jobs_whose_pods_died_with_it() -> None:
    # A sim (or local) worker killed outright takes its pods with it; the next process for
    # the cluster finds none to adopt. The hub hears a new instance and sends it the
    # assignments again: it runs the jobs once more, in place, under the same attempt.
    async with Embedded(_options()) as system:
        uid = await system.submit(jax_job("long", workers=2, duration="1.5s"))
        cluster = await _placed_on(system, uid)
        old = system.worker(cluster)
        old.backend.keeps_pods = True  # no goodbye: nothing handed back, as after SIGKILL
        await old.stop()
        spec = next(s for s in system.options.clusters if s.name == cluster)
        new = Worker(
            system.bus,
            make_backend(spec, system.options, system.logs_root),
            WorkerConfig(cluster=cluster, heartbeat_interval=0.2),
            system.topics,
            registry=CollectorRegistry(),
        )
        system.workers[system.workers.index(old)] = new
        await new.start()
        updates: list[JobStatusUpdate] = []
        final = await system.wait_finished([uid], updates.append, timeout=30)
        assert final[uid].phase == JobPhase.SUCCEEDED, updates
        assert final[uid].cluster == cluster and final[uid].attempt == 1
        assert not [u for u in updates if u.reason == "Redispatched"]
