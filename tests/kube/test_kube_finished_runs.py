"""A finished job's run leaves its `kube` worker after the retention, its pods stay in the
cluster (cleanPodPolicy None), and they are still found by their label: named to a log
request, deleted by a revocation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from bus.events import publish_event
from bus.memory import MemoryBus
from bus.topics import Topics
from schemas.codec import decode_event
from schemas.events import EventType, JobAssigned, JobRevoked, JobStatusUpdate, make_event
from schemas.job_parsing import job_uid_of
from schemas.status import JobPhase
from tests.helpers import jax_job
from tests.kube.sandbox_access import eventually, job_objects, worker_backend
from trainhub_sandbox.kube_cluster import MemberCluster
from workers.worker import Worker, WorkerConfig

pytestmark = pytest.mark.kube


@pytest.fixture
async def system(east: MemberCluster) -> AsyncIterator[tuple[MemoryBus, Topics, Worker]]:
    bus, topics = MemoryBus(), Topics()
    await bus.start()
    config = WorkerConfig(
        cluster="east", heartbeat_interval=0.5, namespaces=["default"], run_retention=0.3
    )
    worker = Worker(bus, worker_backend(east), config, topics, registry=CollectorRegistry())
    await worker.start()
    try:
        yield bus, topics, worker
    finally:
        await worker.stop()
        await bus.close()


def _phases(bus: MemoryBus, topics: Topics, uid: str) -> list[JobPhase]:
    events = [decode_event(r.headers, r.value) for r in bus.records(topics.reports("east"))]
    updates = [e.data_as(JobStatusUpdate) for e in events if e.type == EventType.JOB_STATUS]
    return [u.phase for u in updates if u.uid == uid]


async def test_a_revocation_deletes_the_pods_of_a_run_that_left(
    east: MemberCluster, system: tuple[MemoryBus, Topics, Worker]
) -> None:
    bus, topics, worker = system
    document = jax_job("kube-left", workers=2, duration="1s")
    uid = job_uid_of(document)
    assert uid is not None
    assigned = JobAssigned(uid=uid, cluster="east", attempt=1, job=document)
    event = make_event(EventType.JOB_ASSIGNED, "test/hub", uid, assigned)
    await publish_event(bus, topics.assignments("east"), uid, event)
    try:
        await eventually(lambda: JobPhase.SUCCEEDED in _phases(bus, topics, uid), timeout=30)
        await eventually(lambda: uid not in worker.runs, timeout=10)
        assert len(await job_objects(east, "pods", uid)) == 2  # cleanPodPolicy None
        names = await worker.backend.job_pod_names(uid)
        assert names == ["kube-left-worker-0", "kube-left-worker-1"]

        revoked = JobRevoked(uid=uid, cluster="east", attempt=1, reason="deleted")
        event = make_event(EventType.JOB_REVOKED, "test/hub", uid, revoked)
        await publish_event(bus, topics.assignments("east"), uid, event)
        for _ in range(200):
            if not await job_objects(east, "pods", uid):
                break
            await asyncio.sleep(0.1)
        assert await job_objects(east, "pods", uid) == []
        assert await job_objects(east, "services", uid) == []
    finally:
        await worker.backend.delete_job(uid)
