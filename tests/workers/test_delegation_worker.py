"""A worker in delegate mode, without a cluster: a backend that stands for the member's
operator (its objects' statuses pushed by the test). Created is told once, whoever writes
it; pods the scheduler cannot place are told Unschedulable, and past the unschedulable
timeout the job is handed back to the hub, as in direct mode."""

from __future__ import annotations

import asyncio
from typing import Any

from schemas.codec import decode_event
from schemas.events import EventType, JobHandedBack
from schemas.kubeflow import AnyJob
from schemas.status import JobPhase
from tests.workers.test_worker_runtime import CLUSTER, Harness, jax, running
from workers.backends.base import UNSCHEDULABLE_PREFIX, PodObservation
from workers.backends.delegating import DelegatedStatus, DelegatingBackend
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.worker import WorkerConfig


class Operator(SimBackend, DelegatingBackend):
    """Objects kept by job uid; their statuses are the test's to push."""

    def __init__(self) -> None:
        super().__init__(parse_cluster_spec(f"{CLUSTER}:cpu=8,memory=16Gi").pool())
        self.job_statuses: asyncio.Queue[DelegatedStatus] = asyncio.Queue()
        self.objects: dict[str, int] = {}
        self.deleted: list[str] = []

    async def create_job_object(self, job: AnyJob, attempt: int) -> None:
        self.objects[job.uid] = attempt

    async def suspend_job_object(self, job: AnyJob, suspend: bool) -> None:
        pass

    async def delete_job(self, job_uid: str, namespace: str | None = None) -> None:
        self.objects.pop(job_uid, None)
        self.deleted.append(job_uid)
        await super().delete_job(job_uid, namespace)


def _condition(kind: str, ctype: str, verb: str) -> dict[str, Any]:
    """A condition as the Training Operator writes it."""
    return {
        "type": ctype,
        "status": "True",
        "reason": f"{kind}{ctype}",
        "message": f"{kind} default/d is {verb}.",
        "lastUpdateTime": "2026-12-05T10:00:00Z",
        "lastTransitionTime": "2026-12-05T10:00:00Z",
    }


def _handed_back(h: Harness) -> list[JobHandedBack]:
    return [
        event.data_as(JobHandedBack)
        for event in (
            decode_event(r.headers, r.value) for r in h.bus.records(h.topics.reports(CLUSTER))
        )
        if event.type == EventType.JOB_HANDED_BACK
    ]


async def test_created_is_told_once_whoever_writes_it() -> None:
    backend = Operator()
    async with running(backend) as h:
        uid = await h.assign(jax("d", duration="60s"))
        await h.until(lambda: uid in backend.objects)
        created = _condition("JAXJob", "Created", "created")
        replicas: dict[str, dict[str, int]] = {"Worker": {}}
        await backend.job_statuses.put(
            DelegatedStatus(uid, 1, {"conditions": [created], "replicaStatuses": replicas})
        )
        # A later pass of the operator (its replica counts filled in): still Created.
        counted = {"Worker": {"active": 2}}
        await backend.job_statuses.put(
            DelegatedStatus(uid, 1, {"conditions": [created], "replicaStatuses": counted})
        )
        running_ = _condition("JAXJob", "Running", "running")
        status = {"conditions": [created, running_], "replicaStatuses": counted}
        await backend.job_statuses.put(DelegatedStatus(uid, 1, status))
        await h.until_phase(uid, JobPhase.RUNNING)
        assert h.phases(uid) == [JobPhase.CREATED, JobPhase.RUNNING]
        assert h.worker.runs[uid].status.replicaStatuses["Worker"].active == 2


async def test_a_delegated_job_whose_pods_find_no_node_is_handed_back() -> None:
    backend = Operator()
    config = WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.2, unschedulable_timeout=0.5)
    async with running(backend, config) as h:
        uid = await h.assign(jax("d", workers=2, duration="60s"))
        await h.until(lambda: uid in backend.objects)
        message = f"{UNSCHEDULABLE_PREFIX} 0/2 nodes are available: 2 Insufficient cpu."
        for name in ("d-worker-0", "d-worker-1"):
            await backend.observations.put(PodObservation(uid, name, "Pending", message=message))
        await h.until(lambda: any(u.reason == "Unschedulable" for u in h.updates(uid)))
        told = next(u for u in h.updates(uid) if u.reason == "Unschedulable")
        assert told.message == message and told.phase == JobPhase.CREATED
        await h.until(lambda: bool(_handed_back(h)), timeout=5)
        back = _handed_back(h)
        assert [(b.uid, b.attempt) for b in back] == [(uid, 1)]
        assert "pods unschedulable for" in back[0].reason and message in back[0].reason
        assert backend.deleted == [uid] and uid not in backend.objects
        assert uid not in h.worker.runs


async def test_a_delegated_job_whose_pods_get_a_node_stays() -> None:
    backend = Operator()
    config = WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.2, unschedulable_timeout=0.5)
    async with running(backend, config) as h:
        uid = await h.assign(jax("d", workers=1, duration="60s"))
        await h.until(lambda: uid in backend.objects)
        message = f"{UNSCHEDULABLE_PREFIX} 0/2 nodes are available: 2 Insufficient cpu."
        await backend.observations.put(
            PodObservation(uid, "d-worker-0", "Pending", message=message)
        )
        await h.until(lambda: h.worker.runs[uid].unschedulable_since is not None)
        await backend.observations.put(PodObservation(uid, "d-worker-0", "Running"))
        await h.until(lambda: h.worker.runs[uid].unschedulable_since is None)
        await asyncio.sleep(1.0)
        assert _handed_back(h) == [] and uid in backend.objects
