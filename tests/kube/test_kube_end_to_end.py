"""The whole flow on real clusters: producer → hub → two workers with `kube` backends on their
own sandbox clusters → pods bound by kube-scheduler and run by kwok → status back to the
producer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.cluster import ClusterPolicy
from schemas.events import JobStatusUpdate
from schemas.status import JobPhase
from tests.helpers import jax_job, with_host_port
from tests.kube.sandbox_access import job_objects, worker_backend
from trainhub.producer import follow_status, submit_document
from trainhub_sandbox.kube_cluster import KubeSandbox
from workers.worker import Worker, WorkerConfig

pytestmark = pytest.mark.kube


@dataclass
class System:
    bus: MemoryBus
    topics: Topics
    hub: Hub
    workers: dict[str, Worker]


@pytest.fixture
async def system(kube_sandbox: KubeSandbox) -> AsyncIterator[System]:
    bus, topics, registry = MemoryBus(), Topics(), CollectorRegistry()
    hub = Hub(bus, topics, HubConfig(max_heartbeat_age=10), registry=registry)
    workers = {
        name: Worker(
            bus,
            worker_backend(cluster),
            WorkerConfig(
                cluster=name,
                heartbeat_interval=0.5,
                namespaces=list(cluster.worker_namespaces),
                # The host-port test's pods hold one; baseline Pod Security refuses that.
                policy=ClusterPolicy(allowHostPorts=True),
            ),
            topics,
            registry=registry,
        )
        for name, cluster in kube_sandbox.clusters.items()
    }
    await bus.start()
    await hub.start()
    started: list[Worker] = []
    try:
        for worker in workers.values():
            await worker.start()
            started.append(worker)
        yield System(bus, topics, hub, workers)
    finally:
        for worker in started:
            await worker.stop()
        await hub.stop()
        await bus.close()


async def _follow(system: System, uids: set[str]) -> dict[str, list[JobStatusUpdate]]:
    updates: dict[str, list[JobStatusUpdate]] = {uid: [] for uid in uids}
    pending = set(uids)
    async for update in follow_status(system.bus, system.topics, uids):
        updates[update.uid].append(update)
        if update.phase.finished:
            pending.discard(update.uid)
            if not pending:
                break
    return updates


async def test_jobs_run_on_real_pods_of_the_cluster_the_hub_chose(
    system: System, kube_sandbox: KubeSandbox
) -> None:
    documents = [
        jax_job("e2e-pair", workers=2, cpu="1", memory="1Gi", duration="2s"),
        jax_job("e2e-single", workers=1, cpu="500m", memory="512Mi", duration="1s"),
        # 6 cpu per pod: east's 4-cpu nodes can never hold one, west's 16-cpu nodes can.
        jax_job("e2e-big", workers=2, cpu="6", memory="8Gi", duration="1s"),
    ]
    uids = [await submit_document(system.bus, system.topics, doc) for doc in documents]
    try:
        async with asyncio.timeout(90):
            updates = await _follow(system, set(uids))
        finals = {uid: history[-1] for uid, history in updates.items()}
        assert {u.phase for u in finals.values()} == {JobPhase.SUCCEEDED}, finals
        for history in updates.values():
            phases = [u.phase for u in history]
            assert phases.index(JobPhase.CREATED) < phases.index(JobPhase.RUNNING)
            assert phases.index(JobPhase.RUNNING) < phases.index(JobPhase.SUCCEEDED)
        assert finals[uids[2]].cluster == "west"

        for uid, final in finals.items():
            cluster = kube_sandbox.clusters[final.cluster or ""]
            assert uid in system.workers[cluster.name].runs
            pods = await job_objects(cluster, "pods", uid)
            expected = final.status.replicaStatuses["Worker"].succeeded if final.status else 0
            assert len(pods) == expected
            for pod in pods:
                assert pod["spec"]["nodeName"] in cluster.node_names
                assert pod["status"]["phase"] == "Succeeded"
            other = next(c for c in kube_sandbox.clusters.values() if c.name != cluster.name)
            assert await job_objects(other, "pods", uid) == []
            assert uid not in system.workers[other.name].runs
    finally:
        for worker in system.workers.values():
            for uid in uids:
                await worker.backend.delete_job(uid)


async def test_pods_holding_a_host_port_go_one_to_a_node_as_kube_scheduler_binds_them(
    system: System, kube_sandbox: KubeSandbox
) -> None:
    # Every cluster here has two nodes, each with room for several of these pods but, as
    # kube-scheduler sees it, for one holder of host port 7070.
    pair = with_host_port(jax_job("e2e-port-pair", workers=2, cpu="500m", duration="2s"), 7070)
    three = with_host_port(jax_job("e2e-port-three", workers=3, cpu="500m", duration="1s"), 7070)
    uids = [await submit_document(system.bus, system.topics, doc) for doc in (pair, three)]
    try:
        async with asyncio.timeout(90):
            updates = await _follow(system, set(uids))
        finals = {uid: history[-1] for uid, history in updates.items()}
        assert finals[uids[0]].phase == JobPhase.SUCCEEDED, finals[uids[0]]
        rejected = finals[uids[1]]
        assert rejected.phase == JobPhase.REJECTED, rejected
        assert "its pods hold host port TCP/7070: one to a node" in (rejected.message or "")
        cluster = kube_sandbox.clusters[finals[uids[0]].cluster or ""]
        pods = await job_objects(cluster, "pods", uids[0])
        assert len({pod["spec"]["nodeName"] for pod in pods}) == 2
    finally:
        for worker in system.workers.values():
            for uid in uids:
                await worker.backend.delete_job(uid)
