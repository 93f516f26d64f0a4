"""How a worker answers `pods.requested`: from its runs while it holds them (phases, nodes,
why a pod waits), from the cluster once a run left, an error for a job it never had, nothing
for a request that expired; and each backend's own listing (sim, local, a kube pod object)."""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from schemas.events import PodsListed, PodsRequested
from schemas.job_parsing import parse_job
from schemas.status import JobPhase
from tests.workers.job_documents import job_document, replica
from tests.workers.test_delegation_worker import Operator
from tests.workers.test_finished_runs import ClusterSim
from tests.workers.test_worker_runtime import CLUSTER, Harness, jax, running, sim
from trainhub.producer import PodsUnanswered, request_pods
from workers.backends.kube_pod_listing import listed_pod
from workers.backends.local import LocalBackend
from workers.cluster_spec import parse_cluster_spec
from workers.network import LoopbackNetwork
from workers.rendering import render_job
from workers.worker import WorkerConfig


def ask(uid: str, *, seconds: float = 30) -> PodsRequested:
    deadline = datetime.now(UTC) + timedelta(seconds=seconds)
    return PodsRequested(request_id=str(uuid.uuid4()), uid=uid, deadline=deadline)


async def listed(h: Harness, uid: str) -> PodsListed:
    return await request_pods(h.bus, h.topics, CLUSTER, ask(uid))


async def test_a_running_jobs_pods_are_running_on_their_nodes() -> None:
    backend = sim()
    async with running(backend) as h:
        started = datetime.now(UTC)
        uid = await h.assign(jax("busy", duration="30s"))
        await h.until_phase(uid, JobPhase.RUNNING)
        await h.until(lambda: all(p.phase == "Running" for p in h.worker.runs[uid].pods.values()))
        answer = await listed(h, uid)
        assert answer.error is None and answer.cluster == CLUSTER and answer.uid == uid
        assert [(p.name, p.namespace, p.phase) for p in answer.pods] == [
            ("busy-worker-0", "default", "Running"),
            ("busy-worker-1", "default", "Running"),
        ]
        nodes = {node.name for node in backend.pool.nodes}
        for pod in answer.pods:
            assert pod.node_name in nodes
            assert pod.start_time is not None and pod.start_time >= started
            assert pod.reason is None and pod.message is None


async def test_pods_no_node_can_take_wait_unschedulable_with_the_schedulers_words() -> None:
    async with running(sim("cpu=1,memory=1Gi")) as h:
        uid = await h.assign(jax("huge", cpu="8", duration="30s"))
        runs = h.worker.runs
        await h.until(lambda: uid in runs and runs[uid].pending_reason is not None)
        pods = (await listed(h, uid)).pods
        assert {(p.phase, p.reason, p.node_name) for p in pods} == {
            ("Pending", "Unschedulable", None)
        }
        assert all((p.message or "").startswith("0/1 nodes are available") for p in pods)


async def test_a_failed_pod_is_failed_and_says_its_exit_code() -> None:
    async with running(sim()) as h:
        document = job_document(
            "JAXJob", "crash", {"Worker": replica(1, restart_policy="Never", exit_code=3)}
        )
        uid = await h.assign(document)
        await h.until_phase(uid, JobPhase.FAILED)
        [pod] = (await listed(h, uid)).pods
        assert (pod.name, pod.phase, pod.message) == (
            "crash-worker-0",
            "Failed",
            "its container exited with code 3",
        )


async def test_a_suspended_jobs_pods_are_pending_until_it_is_resumed() -> None:
    async with running(sim()) as h:
        uid = await h.assign(jax("paused", duration="30s"))
        await h.until_phase(uid, JobPhase.RUNNING)
        await h.request("io.trainhub.job.suspended", uid)
        await h.until_phase(uid, JobPhase.SUSPENDED)
        pods = (await listed(h, uid)).pods
        assert {(p.phase, p.reason) for p in pods} == {("Pending", "Suspended")}


async def test_a_run_that_left_is_answered_from_the_pods_the_cluster_keeps() -> None:
    backend = ClusterSim(parse_cluster_spec(f"{CLUSTER}:cpu=4,memory=8Gi").pool())
    config = WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.2, run_retention=0.2)
    async with running(backend, config) as h:
        uid = await h.assign(jax("left", duration="0.05s"))
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        await h.until(lambda: uid not in h.worker.runs)
        answer = await listed(h, uid)
        assert answer.error is None
        assert [(p.name, p.phase) for p in answer.pods] == [
            ("left-worker-0", "Succeeded"),
            ("left-worker-1", "Succeeded"),
        ]


async def test_a_delegated_jobs_pods_are_the_operators_as_the_cluster_lists_them() -> None:
    backend = Operator()
    async with running(backend) as h:
        uid = await h.assign(jax("d", duration="30s"))
        await h.until(lambda: uid in backend.objects)
        answer = await listed(h, uid)
        assert (answer.pods, answer.error) == ([], None)  # the operator made none yet
        # The operator makes them; the run follows only their scheduling, so its own pod
        # states stay Pending while the cluster's say Running.
        for pod in h.worker.runs[uid].pods.values():
            await backend.create_pod(uid, pod.plan)
        await h.until(lambda: all(p.phase == "Running" for p in backend._pods.values()))
        assert [(p.name, p.phase) for p in (await listed(h, uid)).pods] == [
            ("d-worker-0", "Running"),
            ("d-worker-1", "Running"),
        ]
        assert {p.phase for p in h.worker.runs[uid].pods.values()} == {"Pending"}


async def test_an_unknown_job_is_an_error_and_an_expired_request_goes_unanswered() -> None:
    async with running(sim()) as h:
        answer = await listed(h, "nope")
        assert answer.pods == [] and answer.error == f"job nope has no pods on cluster {CLUSTER}"

        uid = await h.assign(jax("late", duration="30s"))
        await h.until(lambda: uid in h.worker.runs)
        with pytest.raises(PodsUnanswered, match=f"worker of cluster {CLUSTER} did not answer"):
            await request_pods(h.bus, h.topics, CLUSTER, ask(uid, seconds=-1), answer_timeout=0.5)


async def test_the_local_backend_lists_its_processes_phases(tmp_path: Path) -> None:
    backend = LocalBackend(
        parse_cluster_spec("here:cpu=2,memory=2Gi").pool(),
        workdir=tmp_path,
        logs_dir=tmp_path / "logs",
    )
    await backend.start()
    code = "import time; time.sleep(0.5)"
    spec = replica(1, restart_policy="Never", command=[sys.executable, "-c", code])
    job = render_job(parse_job(job_document("JAXJob", "here", {"Worker": spec})), LoopbackNetwork())
    try:
        await backend.create_pod(job.job.uid, job.pods[0])
        assert (await asyncio.wait_for(backend.observations.get(), 10)).phase == "Running"
        [pod] = await backend.job_pods(job.job.uid)
        assert (pod.name, pod.phase, pod.node_name) == ("here-worker-0", "Running", "local")
        assert pod.start_time is not None
        assert (await asyncio.wait_for(backend.observations.get(), 10)).phase == "Succeeded"
        assert [p.phase for p in await backend.job_pods(job.job.uid)] == ["Succeeded"]
    finally:
        await backend.close()


def kube_pod(status: dict[str, Any], node: str | None = None) -> dict[str, Any]:
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": "p-0", "namespace": "team"}, "spec": spec, "status": status}


def test_a_kube_pod_object_is_listed_with_what_a_user_looks_for_first() -> None:
    running_pod = listed_pod(
        kube_pod({"phase": "Running", "startTime": "2026-01-02T03:04:05Z"}, node="n1")
    )
    assert (running_pod.namespace, running_pod.phase, running_pod.node_name) == (
        "team",
        "Running",
        "n1",
    )
    assert running_pod.start_time == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    unschedulable = listed_pod(
        kube_pod(
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 Insufficient cpu.",
                    }
                ],
            }
        )
    )
    assert (unschedulable.reason, unschedulable.message) == (
        "Unschedulable",
        "0/3 nodes are available: 3 Insufficient cpu.",
    )
    pulling = listed_pod(
        kube_pod(
            {
                "phase": "Pending",
                "containerStatuses": [
                    {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such"}}}
                ],
            },
            node="n2",
        )
    )
    assert (pulling.phase, pulling.reason, pulling.message) == (
        "Pending",
        "ImagePullBackOff",
        "no such",
    )
    evicted = listed_pod(
        kube_pod({"phase": "Failed", "reason": "Evicted", "message": "x" * 5000}, node="n1")
    )
    assert evicted.reason == "Evicted" and evicted.message == "x" * 1024
    assert listed_pod(kube_pod({})).phase == "Unknown"
