"""The worker's runtime on a real apiserver: MPIJob's ConfigMap under the worker's own RBAC,
deleted with the job; a refused object fails the job instead of the worker; the scheduler's
Unschedulable message reaches the status topic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from bus.events import publish_event
from bus.memory import MemoryBus
from bus.topics import Topics
from schemas.codec import decode_event
from schemas.events import EventType, JobAssigned, JobStatusUpdate, make_event
from schemas.job_parsing import job_uid_of, parse_job
from schemas.status import JobPhase
from tests.helpers import jax_job
from tests.kube.sandbox_access import eventually, job_objects, worker_backend
from tests.workers.job_documents import job_document, replica
from trainhub_sandbox.kube_cluster import MemberCluster
from workers.backends.kube import KubeBackend
from workers.rendering import LABEL_JOB_UID, render_job
from workers.worker import Worker, WorkerConfig

pytestmark = pytest.mark.kube


def _mpi(name: str) -> dict[str, object]:
    return job_document(
        "MPIJob", name, {"Launcher": replica(1, duration="1s"), "Worker": replica(2, cpu="100m")}
    )


async def test_config_maps_are_created_under_the_workers_rbac_and_deleted_with_the_job(
    east: MemberCluster, east_backend: KubeBackend
) -> None:
    rendered = render_job(parse_job(_mpi("kube-mpi")))
    uid = rendered.job.uid
    (config_map,) = rendered.config_maps
    try:
        await east_backend.create_config_map(uid, config_map)
        await east_backend.create_config_map(uid, config_map)  # 409 AlreadyExists is success
        (stored,) = await job_objects(east, "configmaps", uid)
        assert stored["metadata"]["name"] == "kube-mpi-config"
        assert stored["metadata"]["labels"][LABEL_JOB_UID] == uid
        assert stored["data"]["hostfile"] == (
            "kube-mpi-worker-0 slots=1\nkube-mpi-worker-1 slots=1\n"
        )
        assert uid in await east_backend.job_uids()
    finally:
        await east_backend.delete_job(uid)
    assert await job_objects(east, "configmaps", uid) == []
    assert uid not in await east_backend.job_uids()


@dataclass
class _System:
    bus: MemoryBus
    topics: Topics
    worker: Worker

    async def assign(self, document: dict[str, object]) -> str:
        uid = job_uid_of(document)
        assert uid is not None
        data = JobAssigned(uid=uid, cluster="east", attempt=1, job=document)
        event = make_event(EventType.JOB_ASSIGNED, "test/hub", uid, data)
        await publish_event(self.bus, self.topics.assignments("east"), uid, event)
        return uid

    def updates(self, uid: str) -> list[JobStatusUpdate]:
        events = [
            decode_event(r.headers, r.value) for r in self.bus.records(self.topics.reports("east"))
        ]
        found = [e.data_as(JobStatusUpdate) for e in events if e.type == EventType.JOB_STATUS]
        return [u for u in found if u.uid == uid]


@pytest.fixture
async def east_worker(east: MemberCluster) -> AsyncIterator[_System]:
    bus, topics = MemoryBus(), Topics()
    await bus.start()
    config = WorkerConfig(cluster="east", heartbeat_interval=0.5, namespaces=["default"])
    worker = Worker(bus, worker_backend(east), config, topics, registry=CollectorRegistry())
    await worker.start()
    try:
        yield _System(bus, topics, worker)
    finally:
        await worker.stop()
        await bus.close()


async def test_an_mpijob_runs_with_its_config_map_through_the_worker(
    east: MemberCluster, east_worker: _System
) -> None:
    uid = await east_worker.assign(_mpi("kube-mpi-run"))
    try:
        await eventually(lambda: JobPhase.SUCCEEDED in _phases(east_worker, uid), timeout=30)
        assert len(await job_objects(east, "configmaps", uid)) == 1
    finally:
        await east_worker.worker.backend.delete_job(uid)
    assert await job_objects(east, "configmaps", uid) == []


async def test_a_forbidden_namespace_fails_the_job_not_the_worker(
    east_worker: _System,
) -> None:
    uid = await east_worker.assign(jax_job("kube-refused", workers=1, namespace="kube-system"))
    await eventually(lambda: JobPhase.FAILED in _phases(east_worker, uid), timeout=20)
    final = east_worker.updates(uid)[-1]
    assert final.message is not None
    assert "trainhub-worker may not create" in final.message
    crashed = east_worker.worker.crashed
    assert crashed is not None and not crashed.done()
    ok = await east_worker.assign(jax_job("kube-after-refusal", workers=1, duration="1s"))
    try:
        await eventually(lambda: JobPhase.SUCCEEDED in _phases(east_worker, ok), timeout=30)
    finally:
        await east_worker.worker.backend.delete_job(ok)


async def test_the_schedulers_message_reaches_the_status_topic(east_worker: _System) -> None:
    uid = await east_worker.assign(jax_job("kube-too-big", workers=1, cpu="64"))
    try:
        await eventually(
            lambda: any(u.reason == "Unschedulable" for u in east_worker.updates(uid)), timeout=20
        )
        told = next(u for u in east_worker.updates(uid) if u.reason == "Unschedulable")
        assert told.phase == JobPhase.CREATED
        assert told.message is not None
        assert told.message.startswith("Unschedulable: 0/2 nodes are available")
        run = east_worker.worker.runs[uid]
        assert run.unschedulable_since is not None and run.pending_reason == told.message
        await asyncio.sleep(1.0)
        assert sum(u.reason == "Unschedulable" for u in east_worker.updates(uid)) == 1
    finally:
        await east_worker.worker.backend.delete_job(uid)


def _phases(system: _System, uid: str) -> list[JobPhase]:
    return [u.phase for u in system.updates(uid)]


async def test_a_retryable_exit_code_recreates_the_pod_under_its_name(
    east: MemberCluster, east_worker: _System
) -> None:
    document = jax_job("kube-retry", workers=1, duration="1s", exit_code="137")
    document["spec"]["jaxReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    document["spec"]["runPolicy"]["backoffLimit"] = 1
    uid = await east_worker.assign(document)
    try:
        await eventually(lambda: JobPhase.FAILED in _phases(east_worker, uid), timeout=40)
        phases = _phases(east_worker, uid)
        assert phases.count(JobPhase.RESTARTING) == 1
        final = east_worker.updates(uid)[-1]
        assert final.reason == "JAXJobFailed"
        assert "reached the specified backoff limit (1)" in (final.message or "")
        (pod,) = await job_objects(east, "pods", uid)
        assert pod["metadata"]["name"] == "kube-retry-worker-0"
        assert pod["status"]["phase"] == "Failed"  # the second one, kept (cleanPodPolicy None)
        assert len(await job_objects(east, "services", uid)) == 1  # came back with the pod
    finally:
        await east_worker.worker.backend.delete_job(uid)
