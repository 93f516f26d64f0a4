"""Delegation to a member cluster's own Kubeflow Training Operator (v1.9.0, built from its Go
module and run by the sandbox): the upstream operator reconciles a PyTorchJob on a sandbox
cluster by itself; a worker in delegate mode hands it each of the six kinds, which reach
Succeeded on the bus, and a failing one Failed; suspend, resume and delete travel through
the job's object; and a fleet runs one member delegated and one direct."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from bus.aiotasks import TaskOwner
from bus.events import publish_event
from bus.kafka_settings import KafkaSettings
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.codec import decode_event
from schemas.events import (
    CloudEvent,
    EventType,
    JobAssigned,
    JobHandedBack,
    JobStatusUpdate,
    make_event,
)
from schemas.kubeflow import derive_job_uid
from schemas.sim_annotations import SIM_DURATION, SIM_EXIT_CODE
from schemas.status import JobPhase
from tests.kube.conftest import _BUILD_ERROR, _missing_go
from tests.kube.sandbox_access import admin_request, job_objects, worker_backend
from trainhub.producer import follow_status, request, submit_document
from trainhub_sandbox.kube_build import build_kube_binaries
from trainhub_sandbox.kube_cluster import (
    KubeSandbox,
    KwokNodeGroup,
    MemberCluster,
    MemberClusterPlan,
    start_member_clusters,
    stop_member_clusters,
)
from trainhub_sandbox.training_operator import build_training_operator
from workers.backends.base import Backend
from workers.backends.delegated_kinds import DELEGATED_PLURALS, TRAINING_OPERATOR
from workers.backends.kube_client import KubeNotFound
from workers.backends.kube_delegate import KubeDelegateBackend
from workers.rendering import LABEL_JOB_UID, LABEL_OPERATOR
from workers.worker import Worker, WorkerConfig

pytestmark = pytest.mark.kube

OPS = MemberClusterPlan(
    "ops", pools=(KwokNodeGroup(count=2, cpu="16", memory="64Gi"),), training_operator=True
)
PLAIN = MemberClusterPlan("plain", pools=(KwokNodeGroup(count=2, cpu="16", memory="64Gi"),))
CONTAINERS = {
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch"),
    "TFJob": ("tfReplicaSpecs", "tensorflow"),
    "XGBoostJob": ("xgbReplicaSpecs", "xgboost"),
    "PaddleJob": ("paddleReplicaSpecs", "paddle"),
    "JAXJob": ("jaxReplicaSpecs", "jax"),
    "MPIJob": ("mpiReplicaSpecs", "mpi"),
}
CLUSTER_SELECTOR = "trainhub.io/cluster-selector"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def operator_sandbox(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeSandbox]:
    """ops runs the Training Operator; plain does not. Started once for the module."""
    if _missing_go():
        pytest.skip("the Kubernetes sandbox is built with `go`, which is not on PATH")
    build_error = request.config.stash.get(_BUILD_ERROR, None)
    if build_error is not None:
        pytest.fail(f"building the sandbox binaries failed: {build_error}", pytrace=False)
    binaries = build_kube_binaries()
    build_training_operator()  # cached after the first build (a few minutes)
    workdir: Path = tmp_path_factory.mktemp("operator-sandbox")
    sandbox = start_member_clusters([OPS, PLAIN], workdir, binaries=binaries, timeout=240)
    try:
        yield sandbox
    finally:
        stop_member_clusters(sandbox)


@pytest.fixture
def ops(operator_sandbox: KubeSandbox) -> MemberCluster:
    return operator_sandbox.clusters["ops"]


@pytest.fixture
def plain(operator_sandbox: KubeSandbox) -> MemberCluster:
    return operator_sandbox.clusters["plain"]


def _replica(
    kind: str,
    replicas: int,
    duration: str | None = "2s",
    *,
    exit_code: int | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    annotations = {SIM_DURATION: duration} if duration is not None else {}
    if exit_code is not None:
        annotations[SIM_EXIT_CODE] = str(exit_code)
    spec: dict[str, Any] = {
        "replicas": replicas,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {
                "containers": [
                    {
                        "name": CONTAINERS[kind][1],
                        "image": "example/train:1",
                        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
                    }
                ]
            },
        },
    }
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return spec


def _document(
    kind: str,
    name: str,
    replicas: dict[str, dict[str, Any]],
    *,
    managed_by: str | None = "trainhub.io/dispatcher",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    run_policy = {"managedBy": managed_by} if managed_by is not None else {}
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": metadata,
        "spec": {"runPolicy": run_policy, CONTAINERS[kind][0]: replicas},
    }


def _every_kind() -> dict[str, dict[str, Any]]:
    """One job of each kind that succeeds by its kind's rule within a few seconds (MPI: its
    launcher ends, its workers run on until deleted)."""
    return {
        "PyTorchJob": _document(
            "PyTorchJob",
            "d-pytorch",
            {"Master": _replica("PyTorchJob", 1), "Worker": _replica("PyTorchJob", 1)},
        ),
        "TFJob": _document("TFJob", "d-tf", {"Worker": _replica("TFJob", 2)}),
        "XGBoostJob": _document(
            "XGBoostJob",
            "d-xgboost",
            {"Master": _replica("XGBoostJob", 1), "Worker": _replica("XGBoostJob", 1)},
        ),
        "PaddleJob": _document("PaddleJob", "d-paddle", {"Worker": _replica("PaddleJob", 2)}),
        "JAXJob": _document("JAXJob", "d-jax", {"Worker": _replica("JAXJob", 2)}),
        "MPIJob": _document(
            "MPIJob",
            "d-mpi",
            {"Launcher": _replica("MPIJob", 1, "3s"), "Worker": _replica("MPIJob", 2, None)},
        ),
    }


def _path(kind: str, name: str = "") -> str:
    collection = f"/apis/kubeflow.org/v1/namespaces/default/{DELEGATED_PLURALS[kind]}"
    return f"{collection}/{name}" if name else collection


async def _until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout}s waiting for {what}")
        await asyncio.sleep(0.25)


def _true(status: dict[str, Any], ctype: str) -> bool:
    return any(
        c.get("type") == ctype and c.get("status") == "True" for c in status.get("conditions") or []
    )


# -- the upstream operator alone --------------------------------------------------------------


async def test_the_upstream_operator_runs_a_pytorchjob_on_a_sandbox_cluster(
    ops: MemberCluster,
) -> None:
    """No trainhub in the way: the admin creates a PyTorchJob, the operator makes its pods and
    Services, KWOK runs the pods to completion, the operator marks the job Succeeded."""
    document = _document(
        "PyTorchJob",
        "upstream-alone",
        {"Master": _replica("PyTorchJob", 1), "Worker": _replica("PyTorchJob", 2)},
        managed_by=None,
    )
    status, reply = await admin_request(ops, "POST", _path("PyTorchJob"), document)
    assert status == 201, reply
    selector = "labelSelector=training.kubeflow.org%2Fjob-name%3Dupstream-alone"
    pods_path = f"/api/v1/namespaces/default/pods?{selector}"
    try:

        async def pods_made() -> bool:
            _, pods = await admin_request(ops, "GET", pods_path)
            return len(pods.get("items") or []) == 3

        await _until(pods_made, 60, "the operator to create 3 pods")
        _, pods = await admin_request(ops, "GET", pods_path)
        names = sorted(p["metadata"]["name"] for p in pods["items"])
        assert names == [
            "upstream-alone-master-0",
            "upstream-alone-worker-0",
            "upstream-alone-worker-1",
        ]
        _, services = await admin_request(ops, "GET", pods_path.replace("/pods?", "/services?"))
        assert len(services.get("items") or []) == 3

        async def succeeded() -> bool:
            _, job = await admin_request(ops, "GET", _path("PyTorchJob", "upstream-alone"))
            return _true(job.get("status") or {}, "Succeeded")

        await _until(succeeded, 60, "the operator to mark the job Succeeded")
        _, job = await admin_request(ops, "GET", _path("PyTorchJob", "upstream-alone"))
        assert job["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
        assert job["status"]["conditions"][-1]["reason"] == "PyTorchJobSucceeded"
    finally:
        await admin_request(ops, "DELETE", _path("PyTorchJob", "upstream-alone"))
        _, pods = await admin_request(ops, "GET", pods_path)
        for pod in pods.get("items") or []:
            name = pod["metadata"]["name"]
            await admin_request(ops, "DELETE", f"/api/v1/namespaces/default/pods/{name}")


# -- through a hub and a worker in delegate mode ----------------------------------------------


@dataclass
class Fleet:
    """A hub and workers on one in-memory bus, and every status update it publishes."""

    bus: MemoryBus
    topics: Topics
    hub: Hub
    workers: list[Worker] = field(default_factory=list)
    clusters: dict[str, MemberCluster] = field(default_factory=dict)
    updates: dict[str, list[JobStatusUpdate]] = field(default_factory=dict)
    tasks: TaskOwner = field(default_factory=lambda: TaskOwner("statuses"))

    async def follow(self) -> None:
        async def run() -> None:
            async for update in follow_status(self.bus, self.topics):
                self.updates.setdefault(update.uid, []).append(update)

        self.tasks.spawn(run(), "follow")

    def phases(self, uid: str) -> list[JobPhase]:
        return [u.phase for u in self.updates.get(uid, [])]

    def last(self, uid: str) -> JobStatusUpdate | None:
        history = self.updates.get(uid)
        return history[-1] if history else None

    async def wait(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                seen = {uid: self.phases(uid) for uid in self.updates}
                raise AssertionError(f"gave up after {timeout}s waiting for {what}: {seen}")
            await asyncio.sleep(0.1)

    async def wait_finished(self, uids: list[str], timeout: float) -> None:
        def done() -> bool:
            return all((last := self.last(u)) is not None and last.phase.finished for u in uids)

        await self.wait(done, timeout, "the jobs to finish")


def _delegating(cluster: MemberCluster) -> KubeDelegateBackend:
    return KubeDelegateBackend(
        cluster.worker_kubeconfig,
        cluster=cluster.name,
        context=cluster.worker_context,
        namespaces=cluster.worker_namespaces,
    )


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    bus, topics, registry = MemoryBus(), Topics(), CollectorRegistry()
    hub = Hub(bus, topics, HubConfig(max_heartbeat_age=10), registry=registry)
    await bus.start()
    await hub.start()
    running = Fleet(bus, topics, hub)
    await running.follow()
    try:
        yield running
    finally:
        await running.tasks.cancel_all()
        # Workers first: a job deleted under a running worker would be its news.
        leftovers = {worker.cluster: type(worker.backend) for worker in running.workers}
        for worker in running.workers:
            await worker.stop()
        for cluster, kind in leftovers.items():
            await _delete_leftovers(running.clusters[cluster], kind)
        await hub.stop()
        await bus.close()


async def _delete_leftovers(cluster: MemberCluster, kind: type[Backend]) -> None:
    """Delete what the tests' jobs left on the cluster, as its worker identity."""
    backend = _delegating(cluster) if kind is KubeDelegateBackend else worker_backend(cluster)
    await backend.start()
    try:
        for uid in await backend.job_uids():
            await backend.delete_job(uid, "default")
    finally:
        await backend.close()


async def _add_worker(
    fleet: Fleet,
    cluster: MemberCluster,
    backend: Backend,
    labels: dict[str, str] | None = None,
    unschedulable_timeout: float = 120.0,
) -> Worker:
    config = WorkerConfig(
        cluster=cluster.name,
        heartbeat_interval=0.5,
        namespaces=list(cluster.worker_namespaces),
        labels=labels,
        mode="delegate" if isinstance(backend, KubeDelegateBackend) else "direct",
        unschedulable_timeout=unschedulable_timeout,
    )
    worker = Worker(fleet.bus, backend, config, fleet.topics, registry=CollectorRegistry())
    await worker.start()
    fleet.workers.append(worker)
    fleet.clusters[cluster.name] = cluster
    return worker


async def test_every_kind_reaches_succeeded_through_the_member_s_operator(
    ops: MemberCluster, fleet: Fleet
) -> None:
    await _add_worker(fleet, ops, _delegating(ops))
    documents = _every_kind()
    uids = {
        kind: await submit_document(fleet.bus, fleet.topics, doc) for kind, doc in documents.items()
    }
    await fleet.wait_finished(list(uids.values()), 150)

    for kind, uid in uids.items():
        last = fleet.last(uid)
        assert last is not None
        assert last.phase == JobPhase.SUCCEEDED, (kind, fleet.phases(uid))
        assert last.cluster == "ops"
        # The operator's own status, as it wrote it: its reason, its replica counts.
        assert last.reason == f"{kind}Succeeded", last
        assert last.status is not None and last.status.replicaStatuses, last
        name = documents[kind]["metadata"]["name"]
        status, job = await admin_request(ops, "GET", _path(kind, name))
        assert status == 200, job
        # Unset (no --delegate-managed-by): the operator takes it as its own.
        assert "managedBy" not in job["spec"]["runPolicy"], job["spec"]["runPolicy"]
        assert job["metadata"]["labels"][LABEL_JOB_UID] == uid
        assert _true(job["status"], "Succeeded")
        # The pods are the operator's (its labels), counted as the job's by their uid label.
        pods = await job_objects(ops, "pods", uid)
        assert pods, kind
        assert {p["metadata"]["labels"].get(LABEL_OPERATOR) for p in pods} != {"trainhub"}
        assert all(p["metadata"]["ownerReferences"][0]["kind"] == kind for p in pods)
        # Created is told once: the worker's, when it handed the job over (the operator's
        # own Created, and its passes while the job stays created, are the same news).
        assert fleet.phases(uid).count(JobPhase.CREATED) == 1, (kind, fleet.phases(uid))
    assert JobPhase.RUNNING in fleet.phases(uids["PyTorchJob"])


async def test_a_delegated_job_the_member_cannot_schedule_is_handed_back(
    ops: MemberCluster, fleet: Fleet
) -> None:
    """Pods the operator made that no node can take, for the unschedulable timeout: the
    worker tells Unschedulable, then hands the job back as direct mode does, deleting its
    object and pods. (Assigned straight to the worker: the hub would not place a job that
    fits no node; it ignores the hand-back of a placement it never made.)"""
    worker = await _add_worker(fleet, ops, _delegating(ops), unschedulable_timeout=3.0)
    name = "d-too-big"
    replica = _replica("JAXJob", 1, "60s")
    replica["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"
    document = _document("JAXJob", name, {"Worker": replica})
    uid = derive_job_uid("default", name)
    document["metadata"]["uid"] = uid
    assigned = JobAssigned(uid=uid, cluster="ops", attempt=1, job=document)
    event = make_event(EventType.JOB_ASSIGNED, "test/hub", uid, assigned)
    await publish_event(fleet.bus, fleet.topics.assignments("ops"), uid, event)

    def reported(kind: str) -> list[CloudEvent]:
        events = (
            decode_event(r.headers, r.value) for r in fleet.bus.records(fleet.topics.reports("ops"))
        )
        return [e for e in events if e.type == kind and e.subject == uid]

    def unschedulable() -> list[JobStatusUpdate]:
        updates = [e.data_as(JobStatusUpdate) for e in reported(EventType.JOB_STATUS)]
        return [u for u in updates if u.reason == "Unschedulable"]

    await fleet.wait(lambda: bool(unschedulable()), 30, "Unschedulable")
    told = unschedulable()[0]
    assert told.message is not None and told.message.startswith("Unschedulable: 0/2 nodes")
    await fleet.wait(lambda: bool(reported(EventType.JOB_HANDED_BACK)), 30, "the hand-back")
    back = reported(EventType.JOB_HANDED_BACK)[0].data_as(JobHandedBack)
    assert (back.cluster, back.attempt) == ("ops", 1)
    assert back.reason.startswith("pods unschedulable for"), back
    assert uid not in worker.runs

    async def gone() -> bool:
        found, _ = await admin_request(ops, "GET", _path("JAXJob", name))
        return found == 404 and not await job_objects(ops, "pods", uid)

    await _until(gone, 30, "its object and pods to go")


async def test_a_failing_job_reaches_failed_with_the_operator_s_reason(
    ops: MemberCluster, fleet: Fleet
) -> None:
    await _add_worker(fleet, ops, _delegating(ops))
    document = _document(
        "PyTorchJob",
        "d-failing",
        {
            "Master": _replica("PyTorchJob", 1, "1s", exit_code=3, restart_policy="Never"),
            "Worker": _replica("PyTorchJob", 1, "30s", restart_policy="Never"),
        },
    )
    uid = await submit_document(fleet.bus, fleet.topics, document)
    await fleet.wait_finished([uid], 60)
    last = fleet.last(uid)
    assert last is not None
    assert last.phase == JobPhase.FAILED, fleet.phases(uid)
    assert last.reason == "PyTorchJobFailed", last
    assert last.status is not None
    assert last.status.replicaStatuses["Master"].failed == 1


async def test_suspend_resume_and_delete_travel_through_the_job_s_object(
    ops: MemberCluster, fleet: Fleet
) -> None:
    await _add_worker(fleet, ops, _delegating(ops))
    document = _document(
        "PyTorchJob",
        "d-paused",
        {"Master": _replica("PyTorchJob", 1, "300s"), "Worker": _replica("PyTorchJob", 1, "300s")},
    )
    uid = await submit_document(fleet.bus, fleet.topics, document)
    path = _path("PyTorchJob", "d-paused")

    def from_worker(phase: JobPhase) -> Callable[[], bool]:
        def check() -> bool:
            last = fleet.last(uid)
            return last is not None and last.phase == phase and last.cluster == "ops"

        return check

    await fleet.wait(from_worker(JobPhase.RUNNING), 60, "Running")

    await request(fleet.bus, fleet.topics, EventType.JOB_SUSPENDED, uid)
    await fleet.wait(from_worker(JobPhase.SUSPENDED), 60, "Suspended from the operator")
    last = fleet.last(uid)
    assert last is not None and last.reason == "PyTorchJobSuspended", last
    _, job = await admin_request(ops, "GET", path)
    assert job["spec"]["runPolicy"]["suspend"] is True

    async def no_pods() -> bool:
        return not await job_objects(ops, "pods", uid)

    await _until(no_pods, 30, "the suspended job's pods to go")

    await request(fleet.bus, fleet.topics, EventType.JOB_RESUMED, uid)

    def running_again() -> bool:
        phases = fleet.phases(uid)
        return JobPhase.SUSPENDED in phases and phases[-1] == JobPhase.RUNNING

    await fleet.wait(running_again, 60, "Running again after the resume")
    _, job = await admin_request(ops, "GET", path)
    assert job["spec"]["runPolicy"]["suspend"] is False
    assert len(await job_objects(ops, "pods", uid)) == 2

    await request(fleet.bus, fleet.topics, EventType.JOB_DELETED, uid)

    async def gone() -> bool:
        status, _ = await admin_request(ops, "GET", path)
        return status == 404 and not await job_objects(ops, "pods", uid)

    await _until(gone, 30, "the deleted job's object and pods to go")


async def test_a_fleet_with_one_member_delegated_and_one_direct(
    ops: MemberCluster, plain: MemberCluster, fleet: Fleet
) -> None:
    await _add_worker(fleet, ops, _delegating(ops), labels={"mode": "delegate"})
    await _add_worker(fleet, plain, worker_backend(plain), labels={"mode": "direct"})
    replicas = {"Master": _replica("PyTorchJob", 1), "Worker": _replica("PyTorchJob", 1)}
    to_ops = _document(
        "PyTorchJob", "m-ops", replicas, annotations={CLUSTER_SELECTOR: "mode=delegate"}
    )
    to_plain = _document(
        "PyTorchJob", "m-plain", replicas, annotations={CLUSTER_SELECTOR: "mode=direct"}
    )
    uid_ops = await submit_document(fleet.bus, fleet.topics, to_ops)
    uid_plain = await submit_document(fleet.bus, fleet.topics, to_plain)
    await fleet.wait_finished([uid_ops, uid_plain], 90)

    for uid, cluster in ((uid_ops, "ops"), (uid_plain, "plain")):
        last = fleet.last(uid)
        assert last is not None
        assert (last.phase, last.cluster) == (JobPhase.SUCCEEDED, cluster), fleet.phases(uid)
    # ops ran its job through the operator; plain's pods are trainhub's own.
    status, _ = await admin_request(ops, "GET", _path("PyTorchJob", "m-ops"))
    assert status == 200
    operators = {
        p["metadata"]["labels"][LABEL_OPERATOR] for p in await job_objects(ops, "pods", uid_ops)
    }
    assert operators != {"trainhub"}
    direct = await job_objects(plain, "pods", uid_plain)
    assert {p["metadata"]["labels"][LABEL_OPERATOR] for p in direct} == {"trainhub"}
    assert not any(p["metadata"].get("ownerReferences") for p in direct)


async def test_a_restarted_worker_takes_the_delegated_job_back_from_its_object(
    ops: MemberCluster, fleet: Fleet
) -> None:
    """The worker's state is rebuilt from the cluster: the job's object (found by its labels)
    and the assignments topic; the status goes on from what the operator writes."""
    first = await _add_worker(fleet, ops, _delegating(ops))
    document = _document(
        "PyTorchJob",
        "d-adopted",
        {"Master": _replica("PyTorchJob", 1, "8s"), "Worker": _replica("PyTorchJob", 1, "8s")},
    )
    uid = await submit_document(fleet.bus, fleet.topics, document)

    def running() -> bool:
        last = fleet.last(uid)
        return last is not None and last.phase == JobPhase.RUNNING

    await fleet.wait(running, 60, "Running")
    await first.stop()
    fleet.workers.remove(first)
    seen = len(fleet.updates[uid])

    second = await _add_worker(fleet, ops, _delegating(ops))
    assert uid in second.runs  # adopted at start, before any assignment is consumed
    await fleet.wait_finished([uid], 60)
    after = fleet.updates[uid][seen:]
    assert [u.phase for u in after][-1] == JobPhase.SUCCEEDED, fleet.phases(uid)
    assert all(u.attempt == 1 and u.cluster == "ops" for u in after)
    status, job = await admin_request(ops, "GET", _path("PyTorchJob", "d-adopted"))
    assert status == 200 and _true(job["status"], "Succeeded")


async def test_delegate_mode_needs_the_operator_s_crds(plain: MemberCluster) -> None:
    backend = KubeDelegateBackend(
        plain.admin_kubeconfig, cluster=plain.name, context=plain.admin_context
    )
    with pytest.raises(KubeNotFound, match="needs the Training Operator's CRDs on plain"):
        await backend.start()
    assert backend.unserved == set(DELEGATED_PLURALS)


async def test_up_sandbox_in_delegate_mode_hands_the_job_to_the_operator(
    ops: MemberCluster, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """The CLI's path: `trainhub up --sandbox --mode delegate` on the sandbox's state."""
    state = {
        "kafka": {"bootstrap": kafka_settings.bootstrap, "pid": 0},
        "clusters": [
            {
                "name": ops.name,
                "kubeconfig": str(ops.admin_kubeconfig),
                "context": ops.admin_context,
                "workerKubeconfig": str(ops.worker_kubeconfig),
                "workerContext": ops.worker_context,
                "namespaces": list(ops.worker_namespaces),
            }
        ],
    }
    (tmp_path / "sandbox.json").write_text(json.dumps(state))
    name = f"d-cli-{uuid.uuid4().hex[:6]}"
    job = tmp_path / "job.yaml"
    replicas = {"Worker": _replica("JAXJob", 2)}
    job.write_text(yaml.safe_dump(_document("JAXJob", name, replicas)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINHUB_SANDBOX_DIR": str(tmp_path)}
    env.pop("TRAINHUB_BOOTSTRAP", None)
    command = [sys.executable, "-m", "trainhub", "up", "--sandbox", "--no-live", "--mode"]
    command += ["delegate", "--delegate-managed-by", TRAINING_OPERATOR]
    command += ["--exit-on-finish", "--topic-prefix", f"up-{name}", str(job)]
    done = await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True, timeout=180
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "all jobs succeeded" in output, output
    status, found = await admin_request(ops, "GET", _path("JAXJob", name))
    assert status == 200, found
    assert found["spec"]["runPolicy"]["managedBy"] == TRAINING_OPERATOR
    assert _true(found["status"], "Succeeded")
    uid = derive_job_uid("default", name)
    for pod in await job_objects(ops, "pods", uid):
        await admin_request(
            ops, "DELETE", f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}"
        )
    await admin_request(ops, "DELETE", _path("JAXJob", name))
