"""A burst of jobs at a cluster that holds only a few of them at once, on real parts: the
hub's reservations keep it from handing out capacity twice between heartbeats, so
kube-scheduler never finds a pod it cannot bind (no FailedScheduling event) and every job
still runs, once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bus.aiotasks import TaskOwner
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from dispatcher.hub import HubConfig
from schemas.status import JobPhase
from tests.helpers import jax_job
from tests.kube.helpers_e2e import Fleet, pods_of, running_fleet
from tests.kube.sandbox_access import admin_request
from trainhub.producer import submit_document
from trainhub.sandbox.kube_cluster import KubeSandbox

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
        # The burst did outrun the cluster (jobs waited and it was full at times), yet the
        # scheduler never met a pod it could not bind. (The hub's own count of jobs in flight
        # there may briefly exceed 4: the heartbeat showing a finished job's room can reach it
        # before that job's Succeeded does. The cluster's word is the one that counts.)
        waited = [
            u for u in uids if any(h.reason == "WaitingForCapacity" for h in status.history(u))
        ]
        assert waited, "the burst should have exceeded the cluster's room"
        assert peak >= 4, f"at most {peak} jobs ran on small at once; 4 fit"
        assert len(pod_names) == len(uids)
        assert failed == [], [e.get("message") for e in failed]
