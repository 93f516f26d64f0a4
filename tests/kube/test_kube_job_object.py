"""The job's own Kubeflow object on a member cluster in direct mode: where the cluster serves
the kubeflow.org CRDs (and no operator runs), a PyTorchJob run by trainhub's worker is a
pytorchjobs object whose status the worker keeps as the operator would, owning its pods and
Services; deleted there by someone else, the job fails and the garbage collector takes what
it owned (with or without the worker); a Training Operator running there leaves that object
alone; a cluster without the CRDs runs the job as before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas.events import EventType
from schemas.run_policy import TRAINHUB_MANAGER
from schemas.status import JobPhase
from tests.kube.conftest import _BUILD_ERROR, _missing_go
from tests.kube.sandbox_access import admin_request, job_objects, worker_backend
from tests.kube.test_kube_delegation import (
    Fleet,
    _add_worker,
    _document,
    _path,
    _replica,
    _true,
    _until,
    fleet,
)
from trainhub.producer import request, submit_document
from trainhub_sandbox.kube_build import build_controller_manager, build_kube_binaries
from trainhub_sandbox.kube_cluster import (
    KubeSandbox,
    KwokNodeGroup,
    MemberCluster,
    MemberClusterPlan,
    start_member_clusters,
    stop_member_clusters,
)
from trainhub_sandbox.training_operator import build_training_operator
from workers.backends.kube import KubeBackend
from workers.rendering import LABEL_JOB_NAME, LABEL_JOB_UID, LABEL_MANAGED, LABEL_OPERATOR

pytestmark = pytest.mark.kube
__all__ = ["fleet"]  # the fixture, shared with the delegation tests

_POOL = (KwokNodeGroup(count=2, cpu="16", memory="64Gi"),)
# The only cluster of the module with a garbage collector (kube-controller-manager): ops shows
# what the worker itself does where none runs.
CRDS = MemberClusterPlan("crds", pools=_POOL, kubeflow_crds=True, garbage_collector=True)
OPS = MemberClusterPlan("ops", pools=_POOL, training_operator=True)
PLAIN = MemberClusterPlan("plain", pools=_POOL)


@pytest.fixture(scope="module")
def crd_sandbox(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeSandbox]:
    """crds serves the Kubeflow CRDs with no operator, and garbage-collects; ops runs the
    Training Operator; plain has neither. Started once for the module."""
    if _missing_go():
        pytest.skip("the Kubernetes sandbox is built with `go`, which is not on PATH")
    build_error = request.config.stash.get(_BUILD_ERROR, None)
    if build_error is not None:
        pytest.fail(f"building the sandbox binaries failed: {build_error}", pytrace=False)
    binaries = build_kube_binaries()
    build_training_operator()  # cached after the first build (a few minutes)
    build_controller_manager()  # cached after the first build (1-2 minutes after the rest)
    workdir: Path = tmp_path_factory.mktemp("crd-sandbox")
    sandbox = start_member_clusters([CRDS, OPS, PLAIN], workdir, binaries=binaries, timeout=240)
    try:
        yield sandbox
    finally:
        stop_member_clusters(sandbox)


def _direct(cluster: MemberCluster) -> KubeBackend:
    return worker_backend(cluster)


def _pytorchjob(name: str, duration: str = "2s") -> dict[str, Any]:
    replicas = {
        "Master": _replica("PyTorchJob", 1, duration),
        "Worker": _replica("PyTorchJob", 1, duration),
    }
    return _document("PyTorchJob", name, replicas)


def _types(status: dict[str, Any]) -> list[str]:
    return [c["type"] for c in status.get("conditions") or []]


async def _succeeds(fleet: Fleet, cluster: MemberCluster, name: str) -> tuple[str, KubeBackend]:
    backend = _direct(cluster)
    await _add_worker(fleet, cluster, backend)
    uid = await submit_document(fleet.bus, fleet.topics, _pytorchjob(name))
    await fleet.wait_finished([uid], 90)
    last = fleet.last(uid)
    assert last is not None
    assert (last.phase, last.cluster) == (JobPhase.SUCCEEDED, cluster.name), fleet.phases(uid)
    return uid, backend


def _owner(job: dict[str, Any]) -> dict[str, Any]:
    metadata = job["metadata"]
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


async def test_a_direct_pytorchjob_is_a_pytorchjobs_object_with_the_operator_s_status(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    crds = crd_sandbox.clusters["crds"]
    uid, backend = await _succeeds(fleet, crds, "own-object")
    assert backend.job_objects is not None
    assert "PyTorchJob" in backend.job_objects.served

    path = _path("PyTorchJob", "own-object")

    async def status_succeeded() -> bool:
        _, job = await admin_request(crds, "GET", path)
        return _true(job.get("status") or {}, "Succeeded")

    # Written after the bus heard it: the patch follows the status published.
    await _until(status_succeeded, 15, "the object's status to say Succeeded")
    status, job = await admin_request(crds, "GET", path)
    assert status == 200, job
    assert job["spec"]["runPolicy"]["managedBy"] == TRAINHUB_MANAGER
    assert job["metadata"]["labels"][LABEL_JOB_UID] == uid
    written = job["status"]
    types = _types(written)
    assert types.index("Created") < types.index("Running") < types.index("Succeeded"), types
    succeeded = next(c for c in written["conditions"] if c["type"] == "Succeeded")
    assert succeeded["reason"] == "PyTorchJobSucceeded", written
    assert succeeded["message"] == "PyTorchJob own-object is successfully completed."
    assert written["replicaStatuses"]["Master"]["succeeded"] == 1
    assert written["replicaStatuses"]["Worker"]["active"] == 0
    assert written["startTime"] and written["completionTime"]
    assert written["startTime"] <= written["completionTime"]

    # Its pods and Services are owned by it, as upstream's controller sets it.
    pods = await job_objects(crds, "pods", uid)
    services = await job_objects(crds, "services", uid)
    assert len(pods) == 2 and len(services) == 2
    for obj in pods + services:
        assert obj["metadata"]["ownerReferences"] == [_owner(job)], obj["metadata"]

    # Deleting the job deletes its object, and the objects, as before.
    await request(fleet.bus, fleet.topics, EventType.JOB_DELETED, uid)

    async def gone() -> bool:
        found, _ = await admin_request(crds, "GET", path)
        return found == 404 and not await job_objects(crds, "pods", uid)

    await _until(gone, 30, "the deleted job's object and pods to go")


async def test_a_suspension_through_the_hub_is_the_object_s_too(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    crds = crd_sandbox.clusters["crds"]
    await _add_worker(fleet, crds, _direct(crds))
    uid = await submit_document(fleet.bus, fleet.topics, _pytorchjob("own-paused", "300s"))
    path = _path("PyTorchJob", "own-paused")

    def phase(wanted: JobPhase) -> Callable[[], bool]:
        return lambda: (last := fleet.last(uid)) is not None and last.phase == wanted

    async def object_says(suspend: bool, condition: str) -> bool:
        _, job = await admin_request(crds, "GET", path)
        spec_says = (job.get("spec") or {}).get("runPolicy", {}).get("suspend") is suspend
        return spec_says and _true(job.get("status") or {}, condition)

    await fleet.wait(phase(JobPhase.RUNNING), 60, "Running")
    await request(fleet.bus, fleet.topics, EventType.JOB_SUSPENDED, uid)
    await fleet.wait(phase(JobPhase.SUSPENDED), 60, "Suspended")
    await _until(lambda: object_says(True, "Suspended"), 15, "the object to say suspended")
    assert not await job_objects(crds, "pods", uid)

    await request(fleet.bus, fleet.topics, EventType.JOB_RESUMED, uid)
    await fleet.wait(
        lambda: JobPhase.SUSPENDED in fleet.phases(uid) and phase(JobPhase.RUNNING)(),
        60,
        "Running again",
    )
    await _until(lambda: object_says(False, "Running"), 15, "the object to say resumed")
    _, job = await admin_request(crds, "GET", path)
    suspended = next(c for c in job["status"]["conditions"] if c["type"] == "Suspended")
    assert suspended["status"] == "False", job["status"]
    for pod in await job_objects(crds, "pods", uid):
        assert pod["metadata"]["ownerReferences"] == [_owner(job)]
    await request(fleet.bus, fleet.topics, EventType.JOB_DELETED, uid)

    async def gone() -> bool:
        found, _ = await admin_request(crds, "GET", path)
        return found == 404

    await _until(gone, 30, "the deleted job's object to go")


async def _running_with_owned_pods(
    fleet: Fleet, cluster: MemberCluster, name: str
) -> tuple[str, dict[str, Any]]:
    """Submit a long PyTorchJob; return its uid and its object once its two pods and
    Services exist, owned by that object."""
    uid = await submit_document(fleet.bus, fleet.topics, _pytorchjob(name, "300s"))
    await fleet.wait(
        lambda: (last := fleet.last(uid)) is not None and last.phase == JobPhase.RUNNING,
        60,
        "Running",
    )
    _, job = await admin_request(cluster, "GET", _path("PyTorchJob", name))

    async def owned() -> bool:
        objects = await job_objects(cluster, "pods", uid) + await job_objects(
            cluster, "services", uid
        )
        return len(objects) == 4 and all(
            o["metadata"].get("ownerReferences") == [_owner(job)] for o in objects
        )

    await _until(owned, 30, "two pods and two Services owned by the object")
    return uid, job


async def _nothing_left(cluster: MemberCluster, uid: str) -> bool:
    return not await job_objects(cluster, "pods", uid) and not await job_objects(
        cluster, "services", uid
    )


async def _deleted_behind_trainhub(cluster: MemberCluster, name: str) -> None:
    """`kubectl delete pytorchjob NAME` (background propagation, kubectl's default)."""
    path = _path("PyTorchJob", name) + "?propagationPolicy=Background"
    status, reply = await admin_request(cluster, "DELETE", path)
    assert status == 200, reply


async def test_an_object_deleted_on_the_member_fails_its_job_and_takes_its_pods(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    crds = crd_sandbox.clusters["crds"]
    await _add_worker(fleet, crds, _direct(crds))
    uid, _ = await _running_with_owned_pods(fleet, crds, "deleted-behind")

    await _deleted_behind_trainhub(crds, "deleted-behind")
    await fleet.wait_finished([uid], 60)
    last = fleet.last(uid)
    assert last is not None and last.phase == JobPhase.FAILED, fleet.phases(uid)
    assert last.message is not None
    assert "PyTorchJob deleted-behind was deleted on crds before it ended" in last.message
    await _until(lambda: _nothing_left(crds, uid), 30, "its pods and Services to go")
    # Not made again for the failed run.
    found, _ = await admin_request(crds, "GET", _path("PyTorchJob", "deleted-behind"))
    assert found == 404


async def test_without_its_worker_the_garbage_collector_takes_what_the_object_owned(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    """The worker is lost (stopped here: nothing of trainhub deletes anything), then the
    object is deleted: the cluster's garbage collector leaves no orphans."""
    crds = crd_sandbox.clusters["crds"]
    worker = await _add_worker(fleet, crds, _direct(crds))
    uid, _ = await _running_with_owned_pods(fleet, crds, "orphaned")
    await worker.stop()
    fleet.workers.remove(worker)

    await _deleted_behind_trainhub(crds, "orphaned")
    await _until(lambda: _nothing_left(crds, uid), 30, "the garbage collector to take them")


async def test_a_restarted_worker_fails_a_job_whose_object_went_while_it_was_away(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    """On ops no garbage collector runs: the pods outlive the object until the restarted
    worker, finding their owner gone, fails the job and deletes them (no orphans either)."""
    ops = crd_sandbox.clusters["ops"]
    worker = await _add_worker(fleet, ops, _direct(ops))
    uid, _ = await _running_with_owned_pods(fleet, ops, "gone-while-away")
    await worker.stop()
    fleet.workers.remove(worker)
    await _deleted_behind_trainhub(ops, "gone-while-away")
    await asyncio.sleep(2)
    assert len(await job_objects(ops, "pods", uid)) == 2  # nothing collects them here

    await _add_worker(fleet, ops, _direct(ops))
    await fleet.wait_finished([uid], 60)
    last = fleet.last(uid)
    assert last is not None and last.phase == JobPhase.FAILED, fleet.phases(uid)
    assert "PyTorchJob gone-while-away was deleted on ops before it ended" in (last.message or "")
    await _until(lambda: _nothing_left(ops, uid), 30, "its pods and Services to go")
    found, _ = await admin_request(ops, "GET", _path("PyTorchJob", "gone-while-away"))
    assert found == 404


async def test_a_suspend_patched_on_the_object_is_followed_as_the_operator_follows_it(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    """`kubectl patch pytorchjob --type merge -p '{"spec":{"runPolicy":{"suspend":true}}}'`
    suspends the job (its pods go, Suspended is told to the hub and written into the
    object) and setting it back resumes it, as the Training Operator follows its objects."""
    crds = crd_sandbox.clusters["crds"]
    await _add_worker(fleet, crds, _direct(crds))
    uid, _ = await _running_with_owned_pods(fleet, crds, "kubectl-paused")
    path = _path("PyTorchJob", "kubectl-paused")

    def phase(wanted: JobPhase) -> Callable[[], bool]:
        return lambda: (last := fleet.last(uid)) is not None and last.phase == wanted

    async def patch_suspend(suspend: bool) -> None:
        status, reply = await admin_request(
            crds, "PATCH", path, {"spec": {"runPolicy": {"suspend": suspend}}}
        )
        assert status == 200, reply

    async def object_says(condition: str) -> bool:
        _, job = await admin_request(crds, "GET", path)
        return _true(job.get("status") or {}, condition)

    await patch_suspend(True)
    await fleet.wait(phase(JobPhase.SUSPENDED), 60, "Suspended at the hub")
    await _until(lambda: object_says("Suspended"), 15, "the object to say Suspended")
    await _until(lambda: _nothing_left(crds, uid), 30, "its pods and Services to go")
    _, job = await admin_request(crds, "GET", path)
    assert job["spec"]["runPolicy"]["suspend"] is True  # left as the user set it
    assert not _true(job["status"], "Running"), job["status"]

    await patch_suspend(False)
    await fleet.wait(
        lambda: JobPhase.SUSPENDED in fleet.phases(uid) and phase(JobPhase.RUNNING)(),
        60,
        "Running again",
    )
    await _until(lambda: object_says("Running"), 15, "the object to say Running")
    _, job = await admin_request(crds, "GET", path)
    suspended = next(c for c in job["status"]["conditions"] if c["type"] == "Suspended")
    assert suspended["status"] == "False", job["status"]
    assert job["spec"]["runPolicy"]["suspend"] is False
    pods = await job_objects(crds, "pods", uid)
    assert len(pods) == 2
    assert all(pod["metadata"]["ownerReferences"] == [_owner(job)] for pod in pods)
    await request(fleet.bus, fleet.topics, EventType.JOB_DELETED, uid)

    async def gone() -> bool:
        found, _ = await admin_request(crds, "GET", path)
        return found == 404

    await _until(gone, 30, "the deleted job's object to go")


async def test_labels_edited_on_the_object_are_not_its_deletion(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    """Removing trainhub's labels from the object (or adding others) leaves the job running
    and the object followed: deleted afterwards, the job still fails for it."""
    crds = crd_sandbox.clusters["crds"]
    await _add_worker(fleet, crds, _direct(crds))
    uid, _ = await _running_with_owned_pods(fleet, crds, "relabelled")
    path = _path("PyTorchJob", "relabelled")
    labels: dict[str, str | None] = {LABEL_MANAGED: None, LABEL_JOB_UID: None, "team": "x"}
    status, reply = await admin_request(crds, "PATCH", path, {"metadata": {"labels": labels}})
    assert status == 200, reply
    assert LABEL_MANAGED not in reply["metadata"].get("labels", {}), reply["metadata"]
    await asyncio.sleep(5)  # the watch's news, if any, is in by then
    last = fleet.last(uid)
    assert last is not None and last.phase == JobPhase.RUNNING, fleet.phases(uid)
    found, job = await admin_request(crds, "GET", path)
    assert found == 200 and _true(job.get("status") or {}, "Running")
    assert len(await job_objects(crds, "pods", uid)) == 2

    await _deleted_behind_trainhub(crds, "relabelled")
    await fleet.wait_finished([uid], 60)
    last = fleet.last(uid)
    assert last is not None and last.phase == JobPhase.FAILED, fleet.phases(uid)
    assert "PyTorchJob relabelled was deleted on crds before it ended" in (last.message or "")


async def test_a_restarted_worker_fails_a_job_the_collector_took_whole_while_it_was_away(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    """On crds the garbage collector runs: the object deleted while no worker watched takes
    its pods and Services along, so nothing of the job is left to adopt; the restarted
    worker still fails it, with the words of a deletion it watched."""
    crds = crd_sandbox.clusters["crds"]
    worker = await _add_worker(fleet, crds, _direct(crds))
    uid, _ = await _running_with_owned_pods(fleet, crds, "collected-away")
    await worker.stop()
    fleet.workers.remove(worker)
    await _deleted_behind_trainhub(crds, "collected-away")
    await _until(lambda: _nothing_left(crds, uid), 30, "the garbage collector to take them")
    last = fleet.last(uid)
    assert last is not None and last.phase == JobPhase.RUNNING, fleet.phases(uid)

    await _add_worker(fleet, crds, _direct(crds))
    await fleet.wait_finished([uid], 60)
    last = fleet.last(uid)
    assert last is not None and last.phase == JobPhase.FAILED, fleet.phases(uid)
    assert "PyTorchJob collected-away was deleted on crds before it ended" in (last.message or "")
    assert await _nothing_left(crds, uid)
    found, _ = await admin_request(crds, "GET", _path("PyTorchJob", "collected-away"))
    assert found == 404  # not made again


async def test_a_job_whose_name_another_object_holds_fails_and_leaves_it_be(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    crds = crd_sandbox.clusters["crds"]
    document = _pytorchjob("somebody-elses")
    document["spec"]["runPolicy"] = {"managedBy": "example.com/other"}
    status, theirs = await admin_request(crds, "POST", _path("PyTorchJob"), document)
    assert status == 201, theirs
    try:
        await _add_worker(fleet, crds, _direct(crds))
        uid = await submit_document(fleet.bus, fleet.topics, _pytorchjob("somebody-elses"))
        await fleet.wait_finished([uid], 60)
        last = fleet.last(uid)
        assert last is not None and last.phase == JobPhase.FAILED, fleet.phases(uid)
        assert "exists and is not this job's" in (last.message or ""), last
        assert not await job_objects(crds, "pods", uid)
        found, still = await admin_request(crds, "GET", _path("PyTorchJob", "somebody-elses"))
        assert found == 200 and still["metadata"]["uid"] == theirs["metadata"]["uid"]
        assert not still.get("status")  # nobody wrote into it
    finally:
        await admin_request(crds, "DELETE", _path("PyTorchJob", "somebody-elses"))


async def test_the_member_s_operator_leaves_a_trainhub_managed_object_alone(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    ops = crd_sandbox.clusters["ops"]
    uid, _ = await _succeeds(fleet, ops, "beside-operator")
    path = _path("PyTorchJob", "beside-operator")

    async def status_succeeded() -> bool:
        _, job = await admin_request(ops, "GET", path)
        return _true(job.get("status") or {}, "Succeeded")

    await _until(status_succeeded, 15, "the object's status to say Succeeded")
    _, job = await admin_request(ops, "GET", path)
    assert job["spec"]["runPolicy"]["managedBy"] == TRAINHUB_MANAGER
    # Every pod of that job name is trainhub's: the operator made none of its own.
    selector = f"labelSelector={LABEL_JOB_NAME.replace('/', '%2F')}%3Dbeside-operator"
    _, pods = await admin_request(ops, "GET", f"/api/v1/namespaces/default/pods?{selector}")
    items = pods.get("items") or []
    assert len(items) == 2
    assert {p["metadata"]["labels"][LABEL_OPERATOR] for p in items} == {"trainhub"}
    assert all(p["metadata"]["ownerReferences"] == [_owner(job)] for p in items)
    # The status is trainhub's (its reason for the job's success), not rewritten since.
    succeeded = next(c for c in job["status"]["conditions"] if c["type"] == "Succeeded")
    assert succeeded["reason"] == "PyTorchJobSucceeded"
    assert job["status"]["replicaStatuses"]["Master"]["selector"].endswith(
        "operator-name=trainhub,training.kubeflow.org/replica-type=master"
    )
    await request(fleet.bus, fleet.topics, EventType.JOB_DELETED, uid)

    async def gone() -> bool:
        found, _ = await admin_request(ops, "GET", path)
        return found == 404

    await _until(gone, 30, "the deleted job's object to go")


async def test_a_cluster_without_the_crds_runs_the_job_as_before(
    crd_sandbox: KubeSandbox, fleet: Fleet
) -> None:
    plain = crd_sandbox.clusters["plain"]
    uid, backend = await _succeeds(fleet, plain, "no-crds")
    assert backend.job_objects is None
    status, _ = await admin_request(plain, "GET", "/apis/kubeflow.org/v1")
    assert status == 404
    pods = await job_objects(plain, "pods", uid)
    assert len(pods) == 2
    assert not any(p["metadata"].get("ownerReferences") for p in pods)
