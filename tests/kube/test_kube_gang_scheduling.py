"""Gang scheduling on a real member cluster running scheduler-plugins' Coscheduling scheduler:
two jobs whose gangs each fit the cluster alone but not together both reach it (two workers,
as two hubs' would, each sure the room is free). Without PodGroups kube-scheduler binds their
pods one by one and both hold part of what they need; with them one runs whole and the other
waits with none of its pods bound, then runs whole once the first is gone. And a job through
a hub and its worker: its group made before its pods, gone once it succeeded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.job_parsing import parse_job
from schemas.status import JobPhase
from tests.kube.conftest import _BUILD_ERROR, _missing_go
from tests.kube.sandbox_access import admin_request, job_objects
from trainhub.producer import follow_status, submit_document
from trainhub_sandbox.kube_build import build_kube_binaries
from trainhub_sandbox.kube_cluster import (
    KubeSandbox,
    KwokNodeGroup,
    MemberCluster,
    MemberClusterPlan,
    start_member_clusters,
    stop_member_clusters,
)
from trainhub_sandbox.scheduler_plugins import build_scheduler_plugins
from workers.backends.kube import KubeBackend
from workers.backends.kube_client import KubeConflict
from workers.gang_scheduling import SCHEDULER_PLUGINS_GROUP_LABEL, GangScheduling
from workers.rendering import RenderedJob, render_job
from workers.worker import Worker, WorkerConfig

pytestmark = pytest.mark.kube

# Room for four 2-CPU pods: one gang of four, not two.
GANGS = MemberClusterPlan(
    "gangs",
    pools=(KwokNodeGroup(count=2, cpu="4", memory="16Gi"),),
    gang_scheduler="scheduler-plugins",
)
PLUGINS = GangScheduling.of("scheduler-plugins")
PODS_PER_JOB = 4


@pytest.fixture(scope="module")
def gang_sandbox(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeSandbox]:
    if _missing_go():
        pytest.skip("the Kubernetes sandbox is built with `go`, which is not on PATH")
    build_error = request.config.stash.get(_BUILD_ERROR, None)
    if build_error is not None:
        pytest.fail(f"building the sandbox binaries failed: {build_error}", pytrace=False)
    binaries = build_kube_binaries()
    build_scheduler_plugins()  # cached after the first build (a few minutes)
    workdir: Path = tmp_path_factory.mktemp("gang-sandbox")
    sandbox = start_member_clusters([GANGS], workdir, binaries=binaries)
    try:
        yield sandbox
    finally:
        stop_member_clusters(sandbox)


@pytest.fixture
def cluster(gang_sandbox: KubeSandbox) -> MemberCluster:
    return gang_sandbox.clusters["gangs"]


def _backend(cluster: MemberCluster, gang: GangScheduling | None) -> KubeBackend:
    return KubeBackend(
        cluster.worker_kubeconfig,
        cluster=cluster.name,
        context=cluster.worker_context,
        namespaces=cluster.worker_namespaces,
        gang_scheduling=gang,
    )


@pytest.fixture
async def two_workers(
    cluster: MemberCluster, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[KubeBackend, KubeBackend]]:
    """Two workers' backends for the one cluster (two hubs', each placing its own job)."""
    gang: GangScheduling | None = request.param
    backends = (_backend(cluster, gang), _backend(cluster, gang))
    for backend in backends:
        await backend.start()
    try:
        yield backends
    finally:
        for backend in backends:
            for uid in await backend.job_uids():
                await backend.delete_job(uid, "default")
            await backend.close()


def _document(name: str, duration: str | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "example/train:1",
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
                }
            ]
        }
    }
    if duration is not None:
        template["metadata"] = {"annotations": {"trainhub.io/sim-duration": duration}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": PODS_PER_JOB - 1, "template": template},
            },
        },
    }


def _job(name: str, gang: GangScheduling | None) -> RenderedJob:
    return render_job(parse_job(_document(name)), gang=gang)


async def _submit_interleaved(pairs: list[tuple[KubeBackend, RenderedJob]]) -> None:
    """Each worker makes its job's group (if any), then the pods go in turn, one of each job,
    so that a scheduler taking pods one by one serves both."""
    for backend, rendered in pairs:
        if rendered.pod_group is not None:
            await backend.create_pod_group(rendered.job.uid, rendered.pod_group)
    for index in range(PODS_PER_JOB):
        for backend, rendered in pairs:
            pod = rendered.pods[index]
            service = next(s for s in rendered.services if s.name == pod.name)
            await backend.create_service(rendered.job.uid, service)
            await backend.create_pod(rendered.job.uid, pod)


async def _bound(cluster: MemberCluster, rendered: RenderedJob) -> int:
    pods = await job_objects(cluster, "pods", rendered.job.uid)
    return sum(bool(p["spec"].get("nodeName")) for p in pods)


async def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout}s waiting for {what}")
        await asyncio.sleep(0.25)


async def _pod_group(cluster: MemberCluster, name: str) -> tuple[int, dict[str, Any]]:
    path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/{name}"
    return await admin_request(cluster, "GET", path)


@pytest.mark.parametrize("two_workers", [None], indirect=True)
async def test_without_pod_groups_both_jobs_hold_part_of_the_room(
    cluster: MemberCluster, two_workers: tuple[KubeBackend, KubeBackend]
) -> None:
    first, second = _job("plain-a", None), _job("plain-b", None)
    await _submit_interleaved([(two_workers[0], first), (two_workers[1], second)])

    async def room_taken() -> bool:
        return await _bound(cluster, first) + await _bound(cluster, second) == PODS_PER_JOB

    await _until(room_taken, 30, "the four pods the nodes hold to be bound")
    await asyncio.sleep(2)  # nothing more can bind: the rest wait for room that never comes
    counts = (await _bound(cluster, first), await _bound(cluster, second))
    assert all(0 < count < PODS_PER_JOB for count in counts), counts
    assert sum(counts) == PODS_PER_JOB


@pytest.mark.parametrize("two_workers", [PLUGINS], indirect=True)
async def test_with_pod_groups_one_gang_runs_whole_and_the_other_waits_unbound(
    cluster: MemberCluster, two_workers: tuple[KubeBackend, KubeBackend]
) -> None:
    first, second = _job("gang-a", PLUGINS), _job("gang-b", PLUGINS)
    await _submit_interleaved([(two_workers[0], first), (two_workers[1], second)])

    status, group = await _pod_group(cluster, "gang-a")
    assert status == 200, group
    assert group["spec"] == {"minMember": 4, "minResources": {"cpu": "8", "memory": "4Gi"}}
    pods = await job_objects(cluster, "pods", first.job.uid)
    assert {p["spec"]["schedulerName"] for p in pods} == {"scheduler-plugins-scheduler"}
    assert {p["metadata"]["labels"][SCHEDULER_PLUGINS_GROUP_LABEL] for p in pods} == {"gang-a"}

    async def one_whole() -> bool:
        counts = {await _bound(cluster, first), await _bound(cluster, second)}
        return PODS_PER_JOB in counts

    await _until(one_whole, 60, "one gang to be bound whole")
    # Past Coscheduling's Permit wait (10 s): the other gang has still not one pod bound.
    await asyncio.sleep(12)
    counts = sorted([await _bound(cluster, first), await _bound(cluster, second)])
    assert counts == [0, PODS_PER_JOB]

    # The whole one goes (its PodGroup with it): the waiting one then binds whole.
    winner, waiting = (first, second) if await _bound(cluster, first) else (second, first)
    owner = two_workers[0] if winner is first else two_workers[1]
    await owner.delete_job(winner.job.uid, "default")
    status, _ = await _pod_group(cluster, winner.job.metadata.name)
    assert status == 404

    async def other_whole() -> bool:
        return await _bound(cluster, waiting) == PODS_PER_JOB

    await _until(other_whole, 90, "the waiting gang to be bound whole")


@pytest.mark.parametrize("two_workers", [PLUGINS], indirect=True)
async def test_a_changed_job_updates_its_group_and_another_s_group_is_refused(
    cluster: MemberCluster, two_workers: tuple[KubeBackend, KubeBackend]
) -> None:
    backend = two_workers[0]
    rendered = _job("resized", PLUGINS)
    group = rendered.pod_group
    assert group is not None
    await backend.create_pod_group(rendered.job.uid, group)
    await backend.create_pod_group(rendered.job.uid, group)  # idempotent

    # The job changed (say, another attempt asking for fewer pods at once): the group follows.
    group.min_member = 2
    await backend.create_pod_group(rendered.job.uid, group)
    status, found = await _pod_group(cluster, "resized")
    assert status == 200, found
    assert found["spec"] == {"minMember": 2, "minResources": {"cpu": "4", "memory": "2Gi"}}

    # Another job's group of that name (here: another uid) is not taken over.
    other = _job("resized", PLUGINS)
    assert other.pod_group is not None
    with pytest.raises(KubeConflict, match="not this job's"):
        await backend.create_pod_group("someone-else", other.pod_group)

    await backend.delete_job(rendered.job.uid, "default")
    status, _ = await _pod_group(cluster, "resized")
    assert status == 404


async def test_a_job_through_hub_and_worker_runs_in_its_group_which_goes_when_it_succeeds(
    cluster: MemberCluster,
) -> None:
    bus, topics, registry = MemoryBus(), Topics(), CollectorRegistry()
    hub = Hub(bus, topics, HubConfig(max_heartbeat_age=10), registry=registry)
    config = WorkerConfig(
        cluster=cluster.name,
        heartbeat_interval=0.5,
        namespaces=list(cluster.worker_namespaces),
        gang_scheduler="scheduler-plugins",
    )
    worker = Worker(
        bus, _backend(cluster, config.gang_scheduling), config, topics, registry=registry
    )
    await bus.start()
    await hub.start()
    await worker.start()
    try:
        uid = await submit_document(bus, topics, _document("through-hub", duration="3s"))
        phases: list[JobPhase] = []
        async with asyncio.timeout(60):
            async for update in follow_status(bus, topics, {uid}):
                phases.append(update.phase)
                if update.phase == JobPhase.RUNNING:
                    status, group = await _pod_group(cluster, "through-hub")
                    assert status == 200, group
                    assert group["spec"]["minMember"] == PODS_PER_JOB
                    pods = await job_objects(cluster, "pods", uid)
                    labels = {p["metadata"]["labels"][SCHEDULER_PLUGINS_GROUP_LABEL] for p in pods}
                    assert labels == {"through-hub"}
                if update.phase.finished:
                    break
        assert phases[-1] == JobPhase.SUCCEEDED, phases
        assert JobPhase.RUNNING in phases

        async def group_gone() -> bool:
            return (await _pod_group(cluster, "through-hub"))[0] == 404

        await _until(group_gone, 10, "the PodGroup of the finished job to go")
        await worker.backend.delete_job(uid, "default")
    finally:
        await worker.stop()
        await hub.stop()
        await bus.close()
