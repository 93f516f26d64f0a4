"""A job pinned (by nodeSelector) to one cluster across that cluster's worker restart: the
stopped worker is "not now", never "never" (issue 29, item 1)."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from schemas.events import JobStatusUpdate
from schemas.status import JobPhase
from tests.helpers import jax_job, until
from trainhub.embedded import Embedded, EmbeddedOptions, make_backend
from trainhub.settings import TrainhubSettings
from workers.cluster_spec import parse_cluster_spec
from workers.worker import Worker, WorkerConfig

PINNED = {"zone": "west"}


def _options(wait: float = 900.0) -> EmbeddedOptions:
    return EmbeddedOptions(
        clusters=[
            parse_cluster_spec("east:cpu=4,memory=8Gi"),
            parse_cluster_spec("west:cpu=4,memory=8Gi,label.zone=west"),
        ],
        backend="sim",
        heartbeat_interval=0.2,
        max_heartbeat_age=1.5,
        settings=TrainhubSettings(unavailable_cluster_wait=wait),
    )


def _status(system: Embedded, uid: str) -> tuple[JobPhase | None, str | None, str | None]:
    record = system.hub.ledger.get(uid)
    if record is None:
        return None, None, None
    return record.phase, record.reason, record.message


async def _restart(system: Embedded, cluster: str) -> Worker:
    spec = next(s for s in system.options.clusters if s.name == cluster)
    new = Worker(
        system.bus,
        make_backend(spec, system.options, system.logs_root),
        WorkerConfig(cluster=cluster, heartbeat_interval=0.2),
        system.topics,
        registry=CollectorRegistry(),
    )
    old = system.worker(cluster)
    system.workers[system.workers.index(old)] = new
    await new.start()
    return new


async def test_a_pinned_job_waits_for_its_restarting_cluster_and_runs_there() -> None:
    async with Embedded(_options()) as system:
        running = await system.submit(jax_job("pinned", workers=1, node_selector=PINNED))
        await until(lambda: _status(system, running)[0] == JobPhase.RUNNING, timeout=15)
        # A rollout: the worker is stopped (a sim worker's pods die with it: handed back).
        await system.worker("west").stop()
        await until(lambda: _status(system, running)[1] == "WaitingForCluster", timeout=15)
        phase, _, message = _status(system, running)
        assert phase == JobPhase.QUEUED
        assert "west: its worker stopped" in (message or "")
        assert "unavailable_cluster_wait" in (message or "")
        # A new pinned job submitted meanwhile waits too, rather than being rejected.
        fresh = await system.submit(jax_job("newcomer", workers=1, node_selector=PINNED))
        await until(lambda: _status(system, fresh)[1] == "WaitingForCluster", timeout=15)
        await asyncio.sleep(0.5)  # some passes later: still waiting
        assert _status(system, fresh)[0] == JobPhase.QUEUED
        assert _status(system, running)[0] == JobPhase.QUEUED
        await _restart(system, "west")
        updates: list[JobStatusUpdate] = []
        final = await system.wait_finished([running, fresh], updates.append, timeout=30)
        assert final[running].phase == JobPhase.SUCCEEDED, updates
        assert final[fresh].phase == JobPhase.SUCCEEDED, updates
        assert final[running].cluster == final[fresh].cluster == "west"
        assert not [u for u in updates if u.phase == JobPhase.REJECTED]


async def test_a_pinned_job_is_rejected_once_its_cluster_stays_away_past_the_limit() -> None:
    async with Embedded(_options(wait=1.0)) as system:
        await system.worker("west").stop()
        uid = await system.submit(jax_job("stranded", workers=1, node_selector=PINNED))
        await until(lambda: _status(system, uid)[0] == JobPhase.REJECTED, timeout=15)
        _, reason, message = _status(system, uid)
        assert reason == "Unschedulable"
        assert "stayed unavailable for 1s (unavailable_cluster_wait)" in (message or "")
        assert "west: its worker stopped" in (message or "")


async def test_a_job_no_cluster_could_ever_hold_is_still_rejected_at_once() -> None:
    async with Embedded(_options()) as system:
        uid = await system.submit(jax_job("nowhere", workers=1, node_selector={"zone": "mars"}))
        await until(lambda: _status(system, uid)[0] == JobPhase.REJECTED, timeout=15)
        assert "can never fit" in (_status(system, uid)[2] or "")


async def test_an_unknown_priority_class_is_refused_with_the_known_ones_listed() -> None:
    options = _options()
    options.settings = TrainhubSettings(placement={"priority_classes": {"high": 100, "low": -5}})
    async with Embedded(options) as system:
        unknown = jax_job("typo", workers=1)
        unknown["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "hihg"}
        known = jax_job("urgent", workers=1)
        known["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "high"}
        uids = [await system.submit(unknown), await system.submit(known)]
        final = await system.wait_finished(uids, timeout=20)
        assert final[uids[0]].phase == JobPhase.REJECTED
        assert final[uids[0]].reason == "Invalid"
        assert final[uids[0]].message == (
            "spec.runPolicy.schedulingPolicy.priorityClass: unknown class 'hihg'; the hub "
            "knows high (100), low (-5)"
        )
        assert final[uids[1]].phase == JobPhase.SUCCEEDED
