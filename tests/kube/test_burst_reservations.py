"""A burst of jobs at a cluster that holds only a few of them at once, on real parts: the
hub's reservations keep it from handing out capacity twice between heartbeats, so the first
wave is exactly what fits, kube-scheduler binds each of its pods at once (no FailedScheduling
event), and every job still runs, once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from bus.aiotasks import TaskOwner
from bus.events import events_to_end
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from dispatcher.hub import HubConfig
from schemas.cluster import ClusterSnapshot
from schemas.events import EventType
from schemas.status import JobPhase
from tests.helpers import jax_job
from tests.kube.helpers_e2e import Fleet, StatusLog, pods_of, running_fleet
from tests.kube.sandbox_access import admin_request
from trainhub.producer import submit_document
from trainhub_sandbox.kube_cluster import KubeSandbox

pytestmark = [pytest.mark.kube, pytest.mark.kafka]

_IN_FLIGHT = (JobPhase.ASSIGNED, JobPhase.CREATED, JobPhase.RUNNING, JobPhase.RESTARTING)


def _placed_on(fleet: Fleet, cluster: str, uids: set[str]) -> int:
    return sum(
        1
        for record in fleet.hub.ledger.in_phase(*_IN_FLIGHT)
        if record.uid in uids and record.cluster == cluster
    )


async def _failed_scheduling(fleet: Fleet, cluster: str, pods: set[str]) -> list[dict[str, Any]]:
    """kube-scheduler's FailedScheduling events about `pods`, as the cluster's admin sees them."""
    status, reply = await admin_request(
        fleet.cluster(cluster), "GET", "/api/v1/namespaces/default/events"
    )
    assert status == 200, reply
    return [
        event
        for event in reply.get("items") or []
        if event.get("reason") == "FailedScheduling"
        and (event.get("involvedObject") or {}).get("name") in pods
    ]


async def test_a_burst_never_over_fills_a_cluster_between_heartbeats(
    fleet_sandbox: KubeSandbox, kafka_settings: KafkaSettings, topics: Topics
) -> None:
    # Only `small` (2 nodes x 4 cpu) takes part: room for 4 pods of 2 cpu at once, so 4 of
    # these 12 one-pod jobs at a time. All 12 arrive within one heartbeat interval, so the
    # hub's view of `small` is stale for the whole first pass: only its reservations stand
    # between it and over-placing.
    config = HubConfig(max_heartbeat_age=15, lost_after=30, schedule_interval=0.2)
    async with running_fleet(
        kafka_settings, topics, fleet_sandbox, workers=["small"], config=config
    ) as fleet:
        documents = [
            jax_job(f"burst-{i}", workers=1, cpu="2", memory="1Gi", duration="2s")
            for i in range(12)
        ]
        uids: list[str] = []
        peak = 0
        sampler = TaskOwner("burst-sampler")

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, _placed_on(fleet, "small", set(uids)))
                await asyncio.sleep(0.02)

        sampler.spawn(sample(), "sample")
        try:
            uids.extend(
                await asyncio.gather(
                    *(submit_document(fleet.bus, fleet.topics, d) for d in documents)
                )
            )
            await fleet.status.wait_finished(uids, timeout=150)
        finally:
            await sampler.cancel_all()
            pod_names: set[str] = set()
            for uid in uids:
                pod_names.update(
                    p["metadata"]["name"] for p in await pods_of(fleet.cluster("small"), uid)
                )
            failed = await _failed_scheduling(fleet, "small", pod_names)
            await fleet.cleanup(uids)

        status = fleet.status
        for uid in uids:
            history = status.history(uid)
            assert history[-1].phase == JobPhase.SUCCEEDED, status
            assert [u.phase for u in history].count(JobPhase.SUCCEEDED) == 1, status
            assert {u.attempt for u in history if u.phase == JobPhase.ASSIGNED} == {1}, status
        # The first wave, placed before anything had finished (so on reservations alone, the
        # heartbeats showing an empty cluster), is exactly what fits, and kube-scheduler bound
        # each of its pods at once. Later waves follow heartbeats that show finished pods
        # gone; there kube-scheduler may for a moment not have seen the finish itself yet
        # (its cache lags the apiserver like any watcher), which is Kubernetes' own race.
        # "Finished" is the first sign of it on the bus: a job's finished status, or a
        # heartbeat counting fewer requests than before (which can go out first).
        first_finish = min(status.first(u, lambda h: h.phase.finished).time for u in uids)
        first_finish = min(first_finish, await _first_freed(fleet, "small"))
        first_wave = [
            u
            for u in uids
            if status.first(u, lambda h: h.phase == JobPhase.ASSIGNED).time < first_finish
        ]
        assert len(first_wave) == 4, f"{len(first_wave)} jobs placed before any finished; 4 fit"
        first_pods = {
            n for n in pod_names if any(n.startswith(_name(status, u)) for u in first_wave)
        }
        assert [e for e in failed if e["involvedObject"]["name"] in first_pods] == [], failed
        waited = [
            u for u in uids if any(h.reason == "WaitingForCapacity" for h in status.history(u))
        ]
        assert len(waited) >= 8, "the other 8 should have waited for room"
        assert peak >= 4, f"at most {peak} jobs ran on small at once; 4 fit"
        assert len(pod_names) == len(uids)


async def _first_freed(fleet: Fleet, cluster: str) -> datetime:
    """When the cluster's heartbeats first counted fewer requested cpus than before (pods
    finished); the far future if they never did."""
    most = Decimal(0)
    async for event in events_to_end(fleet.bus, fleet.topics.clusters, keys={cluster}):
        if event.type != EventType.CLUSTER_HEARTBEAT:
            continue
        snapshot = ClusterSnapshot.model_validate(event.data)
        requested = sum((n.requested.get("cpu", Decimal(0)) for n in snapshot.nodes), Decimal(0))
        if requested < most:
            return snapshot.observedAt or event.time
        most = max(most, requested)
    return datetime.max.replace(tzinfo=UTC)


def _name(status: StatusLog, uid: str) -> str:
    """The job's pod name prefix (`<job>-`)."""
    name = next(u.name for u in status.history(uid) if u.name)
    return f"{name}-"
