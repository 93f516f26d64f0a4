"""Kubeflow semantics on real control planes: jobs submitted on the bus, placed by the hub,
run by kube workers with their least-privilege identities, pods bound by kube-scheduler and
run by KWOK, whose stages restart containers in place as a kubelet does.

Restarts made in place (OnFailure) count against backoffLimit; ExitCode's retryable and
permanent codes; an MPIJob launcher's ServiceAccount, Role and RoleBinding; every kind from
tests/data/kubeflow running to Succeeded."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from bus.aiotasks import TaskOwner
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.events import EventType, JobStatusUpdate
from schemas.job_parsing import parse_job
from schemas.sim_annotations import SIM_DURATION
from schemas.status import JobPhase
from tests.helpers import jax_job
from tests.kube.sandbox_access import admin_request, job_objects, worker_backend
from tests.workers.job_documents import KINDS
from trainhub.producer import follow_status, request, submit_document
from trainhub_sandbox.kube_cluster import KubeSandbox, MemberCluster
from workers.rendering import render_job
from workers.worker import Worker, WorkerConfig

pytestmark = pytest.mark.kube

DATA = Path(__file__).resolve().parents[1] / "data" / "kubeflow"


@dataclass
class System:
    bus: MemoryBus
    topics: Topics
    hub: Hub
    workers: dict[str, Worker]
    sandbox: KubeSandbox
    updates: dict[str, list[JobStatusUpdate]] = field(default_factory=dict)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def follow(self) -> None:
        async for update in follow_status(self.bus, self.topics, poll_timeout=0.1):
            self.updates.setdefault(update.uid, []).append(update)
            self._arrived.set()

    async def submit(self, document: dict[str, Any]) -> str:
        return await submit_document(self.bus, self.topics, document)

    def history(self, uid: str) -> list[JobStatusUpdate]:
        return self.updates.get(uid, [])

    def phases(self, uid: str) -> list[JobPhase]:
        return [u.phase for u in self.history(uid)]

    def final(self, uid: str) -> JobStatusUpdate:
        return self.history(uid)[-1]

    def cluster_of(self, uid: str) -> MemberCluster:
        name = next((u.cluster for u in reversed(self.history(uid)) if u.cluster), None)
        assert name is not None, f"{uid} has no cluster yet: {self.phases(uid)}"
        return self.sandbox.clusters[name]

    async def until(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        try:
            async with asyncio.timeout(timeout):
                while not check():
                    self._arrived.clear()
                    try:
                        await asyncio.wait_for(self._arrived.wait(), 0.5)
                    except TimeoutError:
                        pass
        except TimeoutError:
            seen = {
                uid: [f"{u.phase.value}({u.reason})" for u in h] for uid, h in self.updates.items()
            }
            raise AssertionError(f"gave up after {timeout}s waiting for {what}: {seen}") from None

    async def until_finished(self, uids: list[str], timeout: float) -> None:
        def done() -> bool:
            return all(self.history(u) and self.final(u).phase.finished for u in uids)

        try:
            await self.until(done, timeout, f"{uids} to finish")
        except AssertionError as error:
            raise AssertionError(f"{error}; pods: {await self.pods(uids)}") from None

    async def pods(self, uids: list[str]) -> dict[str, list[str]]:
        """Each job's pods as the admin sees them, for failure messages."""
        found: dict[str, list[str]] = {}
        for uid in uids:
            for cluster in self.sandbox.clusters.values():
                for pod in await job_objects(cluster, "pods", uid):
                    status = pod.get("status") or {}
                    found.setdefault(uid, []).append(
                        f"{cluster.name}/{pod['metadata']['name']} uid={pod['metadata']['uid']} "
                        f"node={pod['spec'].get('nodeName')} phase={status.get('phase')} "
                        f"deleting={'deletionTimestamp' in pod['metadata']} "
                        f"containers={status.get('containerStatuses')}"
                    )
        return found

    async def delete_everywhere(self, uids: list[str]) -> None:
        for worker in self.workers.values():
            for uid in uids:
                await worker.backend.delete_job(uid)


@pytest.fixture
async def system(kube_sandbox: KubeSandbox) -> AsyncIterator[System]:
    bus, topics, registry = MemoryBus(), Topics(), CollectorRegistry()
    hub = Hub(bus, topics, HubConfig(max_heartbeat_age=10), registry=registry)
    workers = {
        name: Worker(
            bus,
            worker_backend(cluster),
            WorkerConfig(
                cluster=name, heartbeat_interval=0.5, namespaces=list(cluster.worker_namespaces)
            ),
            topics,
            registry=registry,
        )
        for name, cluster in kube_sandbox.clusters.items()
    }
    await bus.start()
    await hub.start()
    tasks = TaskOwner("kubeflow-semantics")
    started: list[Worker] = []
    try:
        for worker in workers.values():
            await worker.start()
            started.append(worker)
        found = System(bus, topics, hub, workers, kube_sandbox)
        tasks.spawn(found.follow(), "status")
        yield found
    finally:
        await tasks.cancel_all()
        for worker in started:
            await worker.stop()
        await hub.stop()
        await bus.close()


@dataclass
class PodWatcher:
    """What the admin sees of a job's pods, polled until stopped: every pod object (uid) and
    the highest restartCount each showed."""

    cluster: MemberCluster
    uid: str
    restart_counts: dict[str, int] = field(default_factory=dict)

    async def run(self) -> None:
        while True:
            for pod in await job_objects(self.cluster, "pods", self.uid):
                statuses = pod["status"].get("containerStatuses") or []
                count = sum(int(s.get("restartCount") or 0) for s in statuses)
                pod_uid = pod["metadata"]["uid"]
                self.restart_counts[pod_uid] = max(count, self.restart_counts.get(pod_uid, 0))
            await asyncio.sleep(0.2)


# -- restarts -------------------------------------------------------------------------------


async def test_onfailure_containers_restart_in_place_until_the_backoff_limit(
    system: System,
) -> None:
    document = jax_job(
        "kube-in-place",
        workers=1,
        cpu="500m",
        memory="512Mi",
        duration="1s",
        exit_code="1",
        restart_policy="OnFailure",
    )
    document["spec"]["runPolicy"]["backoffLimit"] = 2
    uid = await system.submit(document)
    tasks = TaskOwner("pod-watch")
    try:
        await system.until(lambda: JobPhase.RUNNING in system.phases(uid), 30, "Running")
        watcher = PodWatcher(system.cluster_of(uid), uid)
        tasks.spawn(watcher.run(), "pods")
        await system.until_finished([uid], timeout=60)
        await asyncio.sleep(0.5)  # one more look: the pod goes once the limit is passed
        await tasks.cancel_all()

        phases = system.phases(uid)
        assert phases.count(JobPhase.RESTARTING) == 2, phases
        # Restarting and Running take turns: the container runs again after each restart.
        after_created = [p for p in phases if p in (JobPhase.RUNNING, JobPhase.RESTARTING)]
        assert after_created == [
            JobPhase.RUNNING,
            JobPhase.RESTARTING,
            JobPhase.RUNNING,
            JobPhase.RESTARTING,
            JobPhase.RUNNING,
        ], phases
        restarting = [u for u in system.history(uid) if u.phase == JobPhase.RESTARTING]
        assert [u.message for u in restarting] == [
            f"JAXJob kube-in-place is restarting because kube-in-place-worker-0 exited with "
            f"code 1 (restart {n})."
            for n in (1, 2)
        ]
        final = system.final(uid)
        assert final.phase == JobPhase.FAILED
        assert final.reason == "JAXJobFailed"
        assert final.message == (
            "Job kube-in-place has failed because it has reached the specified backoff limit "
            "(2): kube-in-place-worker-0 exited with code 1."
        )
        assert final.status is not None and final.status.completionTime is not None
        # One pod object all along, restarted by the kubelet (KWOK) and never re-created.
        (restarts,) = watcher.restart_counts.values()
        assert restarts >= 2, watcher.restart_counts
        # Past the limit the job stops: the crash-looping pod is deleted.
        assert await job_objects(system.cluster_of(uid), "pods", uid) == []
    finally:
        await tasks.cancel_all()
        await system.delete_everywhere([uid])


async def test_exit_code_policy_retries_signals_and_fails_on_the_programs_verdict(
    system: System,
) -> None:
    def exit_code_job(name: str, code: str) -> dict[str, Any]:
        document = jax_job(
            name, workers=1, cpu="500m", memory="512Mi", duration="1s", exit_code=code
        )
        document["spec"]["jaxReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
        document["spec"]["runPolicy"]["backoffLimit"] = 1
        return document

    retried = await system.submit(exit_code_job("kube-exit-137", "137"))
    permanent = await system.submit(exit_code_job("kube-exit-1", "1"))
    try:
        await system.until_finished([retried, permanent], timeout=60)

        final = system.final(permanent)
        assert final.phase == JobPhase.FAILED, system.phases(permanent)
        assert JobPhase.RESTARTING not in system.phases(permanent)
        assert final.reason == "JAXJobFailed"
        assert final.message is not None
        assert "kube-exit-1-worker-0 exited with code 1 (restartPolicy ExitCode)" in final.message

        # 137 is retryable: the pod is re-created (a new object under its name) once, and
        # its second 137 passes the limit of 1.
        assert system.phases(retried).count(JobPhase.RESTARTING) == 1
        final = system.final(retried)
        assert final.phase == JobPhase.FAILED and final.reason == "JAXJobFailed"
        assert final.message is not None
        assert "reached the specified backoff limit (1)" in final.message
        (pod,) = await job_objects(system.cluster_of(retried), "pods", retried)
        assert pod["metadata"]["name"] == "kube-exit-137-worker-0"
        assert pod["spec"]["restartPolicy"] == "Never"  # ExitCode is Never for the kubelet
        (status,) = pod["status"]["containerStatuses"]
        assert status["restartCount"] == 0
        assert status["state"]["terminated"]["exitCode"] == 137
    finally:
        await system.delete_everywhere([retried, permanent])


# -- MPIJob launcher access -------------------------------------------------------------------


async def _may_exec(cluster: MemberCluster, account: str, pod: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:default:{account}",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:default"],
            "resourceAttributes": {
                "namespace": "default",
                "verb": "create",
                "resource": "pods",
                "subresource": "exec",
                "name": pod,
            },
        },
    }
    path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    status, reply = await admin_request(cluster, "POST", path, review)
    assert status == 201, reply
    return bool(reply["status"].get("allowed"))


async def _rbac_objects(cluster: MemberCluster, uid: str) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    selector = f"labelSelector=trainhub.io%2Fjob-uid%3D{uid}"
    for resource, prefix in (
        ("serviceaccounts", "/api/v1"),
        ("roles", "/apis/rbac.authorization.k8s.io/v1"),
        ("rolebindings", "/apis/rbac.authorization.k8s.io/v1"),
    ):
        path = f"{prefix}/namespaces/default/{resource}?{selector}"
        status, reply = await admin_request(cluster, "GET", path)
        assert status == 200, reply
        found[resource] = list(reply.get("items") or [])
    return found


def _mpi_job(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DATA / "mpi-pi.yaml").read_text())
    document["metadata"] = {"name": name, "namespace": "default"}
    document["spec"]["runPolicy"] = {"managedBy": "trainhub.io/dispatcher"}
    replicas = document["spec"]["mpiReplicaSpecs"]
    for rspec in replicas.values():
        rspec["template"]["spec"]["containers"][0]["resources"]["limits"] = {
            "cpu": "500m",
            "memory": "512Mi",
        }
    # The launcher's mpirun ends after 2s; the workers wait (no annotation: they keep running).
    replicas["Launcher"]["template"]["metadata"] = {"annotations": {SIM_DURATION: "2s"}}
    return document


async def test_an_mpijob_launcher_gets_its_own_account_allowed_to_exec_into_its_workers(
    system: System,
) -> None:
    uid = await system.submit(_mpi_job("kube-mpi-rbac"))
    try:
        await system.until(lambda: JobPhase.RUNNING in system.phases(uid), 30, "Running")
        cluster = system.cluster_of(uid)
        found = await _rbac_objects(cluster, uid)
        (account,) = found["serviceaccounts"]
        (role,) = found["roles"]
        (binding,) = found["rolebindings"]
        for obj in (account, role, binding):
            assert obj["metadata"]["name"] == "kube-mpi-rbac-launcher"
            assert obj["metadata"]["labels"]["app"] == "kube-mpi-rbac"
        assert role["rules"] == [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": [""],
                "resources": ["pods/exec"],
                "verbs": ["create"],
                "resourceNames": ["kube-mpi-rbac-worker-0", "kube-mpi-rbac-worker-1"],
            },
        ]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "kube-mpi-rbac-launcher", "namespace": "default"}
        ]
        assert binding["roleRef"]["name"] == "kube-mpi-rbac-launcher"
        pods = {p["metadata"]["name"]: p for p in await job_objects(cluster, "pods", uid)}
        launcher = pods["kube-mpi-rbac-launcher"]["spec"]
        assert launcher["serviceAccountName"] == "kube-mpi-rbac-launcher"
        assert pods["kube-mpi-rbac-worker-0"]["spec"].get("serviceAccountName") in (
            None,
            "default",
        )
        # The apiserver's own verdict: exec into the job's workers, and into nothing else.
        account_name = "kube-mpi-rbac-launcher"
        assert await _may_exec(cluster, account_name, "kube-mpi-rbac-worker-1")
        assert not await _may_exec(cluster, account_name, "kube-mpi-rbac-launcher")
        assert not await _may_exec(cluster, account_name, "someone-elses-pod")

        # Horovod's elastic host discovery lists the workers once they run (the worker
        # patches the ConfigMap as upstream's controller does); the hostfile lists them all.
        expected = "#!/bin/sh\necho kube-mpi-rbac-worker-0:1\necho kube-mpi-rbac-worker-1:1"
        async with asyncio.timeout(20):
            while True:
                (config,) = await job_objects(cluster, "configmaps", uid)
                if config["data"]["discover_hosts.sh"] == expected:
                    break
                await asyncio.sleep(0.1)
        assert config["data"]["hostfile"] == (
            "kube-mpi-rbac-worker-0 slots=1\nkube-mpi-rbac-worker-1 slots=1\n"
        )

        await system.until_finished([uid], timeout=30)
        assert system.final(uid).phase == JobPhase.SUCCEEDED
        # cleanPodPolicy Running took the workers; the account stays with the job.
        assert len((await _rbac_objects(cluster, uid))["roles"]) == 1

        await request(system.bus, system.topics, EventType.JOB_DELETED, uid)

        async with asyncio.timeout(20):
            while True:
                left = await _rbac_objects(cluster, uid)
                if not any(left.values()) and not await job_objects(cluster, "pods", uid):
                    break
                await asyncio.sleep(0.2)
    finally:
        await system.delete_everywhere([uid])


async def test_launcher_access_is_created_idempotently_under_the_workers_rbac(
    east: MemberCluster,
) -> None:
    backend = worker_backend(east)
    await backend.start()
    rendered = render_job(parse_job(_mpi_job("kube-mpi-twice")))
    uid = rendered.job.uid
    (access,) = rendered.access
    try:
        await backend.create_access(uid, access)
        await backend.create_access(uid, access)  # 409 AlreadyExists is success
        found = await _rbac_objects(east, uid)
        assert [len(found[r]) for r in ("serviceaccounts", "roles", "rolebindings")] == [1, 1, 1]
        assert uid in await backend.job_uids()
        await backend.delete_job(uid)
        assert not any((await _rbac_objects(east, uid)).values())
        assert uid not in await backend.job_uids()
    finally:
        await backend.delete_job(uid)
        await backend.close()


# -- every kind -------------------------------------------------------------------------------

EXAMPLES = {
    "JAXJob": "jax-simple.yaml",
    "PyTorchJob": "pytorch-simple.yaml",
    "TFJob": "tf-chief-evaluator.yaml",
    "XGBoostJob": "xgboost-iris.yaml",
    "PaddleJob": "paddle-ps.yaml",
    "MPIJob": "mpi-pi.yaml",
}


def _runnable(kind: str, path: Path) -> dict[str, Any]:
    """The upstream example as a user would bring it: renamed, in the worker's namespace,
    managed by trainhub, and each replica's workload ending after a second on KWOK."""
    document: dict[str, Any] = copy.deepcopy(yaml.safe_load(path.read_text()))
    assert document["kind"] == kind
    document["metadata"] = {"name": f"every-{kind.lower()}", "namespace": "default"}
    run_policy = document["spec"].setdefault("runPolicy", {})
    run_policy["managedBy"] = "trainhub.io/dispatcher"
    run_policy.pop("ttlSecondsAfterFinished", None)
    field_name, _ = KINDS[kind]
    for rspec in document["spec"][field_name].values():
        metadata = rspec["template"].setdefault("metadata", {})
        metadata.setdefault("annotations", {})[SIM_DURATION] = "1s"
    return document


async def test_every_kind_runs_to_succeeded_on_real_clusters(system: System) -> None:
    documents = {kind: _runnable(kind, DATA / name) for kind, name in EXAMPLES.items()}
    uids = {kind: await system.submit(doc) for kind, doc in documents.items()}
    try:
        await system.until_finished(list(uids.values()), timeout=120)
        for kind, uid in uids.items():
            final = system.final(uid)
            assert final.phase == JobPhase.SUCCEEDED, (kind, system.phases(uid))
            assert final.kind == kind and final.reason == f"{kind}Succeeded"
            phases = system.phases(uid)
            assert phases.index(JobPhase.CREATED) < phases.index(JobPhase.SUCCEEDED), kind
            cluster = system.cluster_of(uid)
            # The pods ran on this cluster's nodes; the other cluster never had any.
            pods = await job_objects(cluster, "pods", uid)
            assert pods, kind
            for pod in pods:
                assert pod["spec"]["nodeName"] in cluster.node_names, kind
            for other in system.sandbox.clusters.values():
                if other.name != cluster.name:
                    assert await job_objects(other, "pods", uid) == [], kind
        # Kind-specific objects made it: Services for all but MPI, MPI's hostfile and access.
        for kind, uid in uids.items():
            cluster = system.cluster_of(uid)
            services = await job_objects(cluster, "services", uid)
            assert (kind == "MPIJob") == (services == []), kind
        mpi = uids["MPIJob"]
        (config,) = await job_objects(system.cluster_of(mpi), "configmaps", mpi)
        assert config["metadata"]["name"] == "every-mpijob-config"
        assert len((await _rbac_objects(system.cluster_of(mpi), mpi))["roles"]) == 1
    finally:
        await system.delete_everywhere(list(uids.values()))
