"""The job's own Kubeflow object in direct mode, without a cluster: its status in the
Training Operator's shape, the ownerReferences that lead back to it, and what its watch
makes of it going."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, cast

from schemas.job_parsing import parse_job
from schemas.status import JobCondition, JobStatus, ReplicaStatus
from tests.workers.job_documents import job_document, replica
from workers.backends.base import JobObjectLost, JobObjectSuspension
from workers.backends.kube_client import KubeApi, KubeNotFound
from workers.backends.kube_job_object import (
    JobObjectRef,
    JobObjects,
    owned_by_job_object,
    status_body,
)
from workers.rendering import LABEL_ATTEMPT, LABEL_JOB_UID, LABEL_MANAGED, OPERATOR_NAME


def test_the_status_is_written_as_the_operator_writes_it() -> None:
    started = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    status = JobStatus(
        conditions=[
            JobCondition(
                type="Created",
                status="True",
                reason="PyTorchJobCreated",
                message="PyTorchJob default/a is created.",
                lastUpdateTime=started,
                lastTransitionTime=started,
            ),
            JobCondition(type="Running", status="True", reason="PyTorchJobRunning"),
        ],
        replicaStatuses={
            "Master": ReplicaStatus(active=1, selector="a=b"),
            "Worker": ReplicaStatus(succeeded=2, failed=1),
        },
        # Another zone: written in UTC, whole seconds, as metav1.Time is.
        startTime=started.astimezone(timezone(timedelta(hours=2))),
    )
    assert status_body(status) == {
        "conditions": [
            {
                "type": "Created",
                "status": "True",
                "reason": "PyTorchJobCreated",
                "message": "PyTorchJob default/a is created.",
                "lastUpdateTime": "2026-01-02T03:04:05Z",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
            },
            {"type": "Running", "status": "True", "reason": "PyTorchJobRunning"},
        ],
        "replicaStatuses": {
            "Master": {"active": 1, "succeeded": 0, "failed": 0, "selector": "a=b"},
            "Worker": {"active": 0, "succeeded": 2, "failed": 1},
        },
        "startTime": "2026-01-02T03:04:05Z",
        # A merge patch's null: a time the run no longer has goes.
        "completionTime": None,
    }


def test_an_object_s_controller_reference_names_its_job_object() -> None:
    ref = JobObjectRef("MPIJob", "team-a", "m", "1234")
    pod = {
        "metadata": {
            "namespace": "team-a",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "9"},
                ref.owner_reference(),
            ],
        }
    }
    assert owned_by_job_object(pod) == ref
    assert ref.plural == "mpijobs"
    assert ref.owner_reference() == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "name": "m",
        "uid": "1234",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    # Not a controller, or not a Kubeflow job: not the job's object.
    loose = {**ref.owner_reference(), "controller": False}
    assert owned_by_job_object({"metadata": {"ownerReferences": [loose]}}) is None
    other = {**ref.owner_reference(), "apiVersion": "batch/v1", "kind": "Job"}
    assert owned_by_job_object({"metadata": {"ownerReferences": [other]}}) is None
    assert owned_by_job_object({"metadata": {}}) is None


def _held(job_uid: str, object_uid: str, attempt: int = 1) -> JobObjects:
    """JobObjects holding the job's object as `ensure` leaves it (no API is called here)."""
    objects = JobObjects(cast(KubeApi, None), "east")
    objects.served = {"PyTorchJob"}
    objects._hold(job_uid, JobObjectRef("PyTorchJob", "default", "obj", object_uid), attempt)
    return objects


def _object(
    job_uid: str,
    object_uid: str,
    *,
    generation: int = 1,
    suspend: bool | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    run_policy = {} if suspend is None else {"suspend": suspend}
    return {
        "metadata": {
            "name": "obj",
            "namespace": "default",
            "uid": object_uid,
            "generation": generation,
            "labels": {LABEL_MANAGED: OPERATOR_NAME, LABEL_JOB_UID: job_uid}
            if labels is None
            else labels,
        },
        "spec": {"runPolicy": run_policy},
    }


async def test_the_held_object_deleted_by_someone_else_is_told_once_and_not_made_again() -> None:
    objects = _held("job-1", "cr-1", attempt=2)
    await objects._on_object("pytorchjobs", "ADDED", _object("job-1", "cr-1"))
    assert objects.news.empty()
    await objects._on_object("pytorchjobs", "DELETED", _object("job-1", "cr-1"))
    assert objects.news.get_nowait() == JobObjectLost("job-1", 2, "PyTorchJob obj")
    assert objects.ref("job-1") is None  # nothing is owned by it, written or deleted any more
    document = job_document("PyTorchJob", "obj", {"Master": replica(1)})
    document["metadata"]["uid"] = "job-1"
    job = parse_job(document)
    # The same attempt does not make it again (the job fails); a later one would.
    assert await objects.ensure(job, 2) is None
    await objects._on_object("pytorchjobs", "DELETED", _object("job-1", "cr-1"))
    assert objects.news.empty()


async def test_another_object_of_the_job_going_is_no_news() -> None:
    objects = _held("job-1", "cr-2")
    # The previous attempt's object, deleted by the worker itself before it made this one.
    await objects._on_object("pytorchjobs", "DELETED", _object("job-1", "cr-1"))
    await objects._on_object("pytorchjobs", "DELETED", _object("job-2", "cr-9"))
    assert objects.news.empty()
    assert objects.ref("job-1") is not None


async def test_a_relist_without_an_object_seen_before_saw_it_go() -> None:
    objects = _held("job-1", "cr-1")
    objects._hold("job-2", JobObjectRef("PyTorchJob", "default", "other", "cr-2"), 1)
    await objects._on_object("pytorchjobs", "LISTED", _object("job-1", "cr-1"))
    # cr-2 was made after the list began (never seen): its absence from the list is no news.
    objects._on_listed("pytorchjobs", "default", set())
    assert objects.news.get_nowait().job_uid == "job-1"
    assert objects.news.empty()
    assert objects.ref("job-2") is not None


async def test_a_label_edited_or_removed_on_the_held_object_is_no_deletion() -> None:
    """The watches select by nothing: the held object is known by its uid, so one whose
    labels someone removed is still the job's, followed, and its deletion still told."""
    objects = _held("job-1", "cr-1")
    assert all(watch.selector == "" for watch in objects.watches(None, 60))
    await objects._on_object("pytorchjobs", "ADDED", _object("job-1", "cr-1"))
    await objects._on_object("pytorchjobs", "MODIFIED", _object("job-1", "cr-1", labels={}))
    objects._on_listed("pytorchjobs", None, {"cr-1"})
    assert objects.news.empty()
    assert objects.ref("job-1") is not None
    # Someone else's objects of the kind (seen too now) are no news either way.
    await objects._on_object("pytorchjobs", "ADDED", _object("x", "cr-9", labels={}))
    await objects._on_object("pytorchjobs", "DELETED", _object("x", "cr-9", labels={}))
    assert objects.news.empty()
    await objects._on_object("pytorchjobs", "DELETED", _object("job-1", "cr-1", labels={}))
    assert objects.news.get_nowait() == JobObjectLost("job-1", 1, "PyTorchJob obj")


async def test_a_suspend_someone_else_set_on_the_held_object_is_told_once() -> None:
    objects = _held("job-1", "cr-1", attempt=3)
    objects._suspended["job-1"] = False
    objects._generations["job-1"] = 1
    await objects._on_object("pytorchjobs", "MODIFIED", _object("job-1", "cr-1", suspend=False))
    await objects._on_object(
        "pytorchjobs", "MODIFIED", _object("job-1", "cr-1", generation=2, suspend=True)
    )
    assert objects.news.get_nowait() == JobObjectSuspension("job-1", 3, True, "PyTorchJob obj")
    # The same spec again (a status write, a relist), or an older one late: no news.
    await objects._on_object(
        "pytorchjobs", "MODIFIED", _object("job-1", "cr-1", generation=2, suspend=True)
    )
    await objects._on_object("pytorchjobs", "MODIFIED", _object("job-1", "cr-1", suspend=False))
    assert objects.news.empty()
    # Another spec change that leaves suspend as it is: no news; set back: told.
    await objects._on_object(
        "pytorchjobs", "MODIFIED", _object("job-1", "cr-1", generation=3, suspend=True)
    )
    assert objects.news.empty()
    await objects._on_object(
        "pytorchjobs", "MODIFIED", _object("job-1", "cr-1", generation=4, suspend=False)
    )
    assert objects.news.get_nowait() == JobObjectSuspension("job-1", 3, False, "PyTorchJob obj")


class _Patches:
    """An API that answers a patch with the object's next generation, and records them."""

    def __init__(self) -> None:
        self.patches: list[Any] = []
        self.custom = SimpleNamespace(patch_namespaced_custom_object=None)
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def call(self, *args: Any, **kw: Any) -> dict[str, Any]:
        self.patches.append(args[-1])
        self.asked.set()
        await self.answer.wait()
        return {"metadata": {"generation": 2}}


async def test_the_worker_s_own_suspend_of_the_object_is_no_news() -> None:
    """A suspension through the hub is written into the object: its watch event (even one
    that comes before the patch's answer) is not taken for someone else's."""
    api = _Patches()
    objects = JobObjects(cast(KubeApi, api), "east")
    objects.served = {"PyTorchJob"}
    objects._hold("job-1", JobObjectRef("PyTorchJob", "default", "obj", "cr-1"), 1)
    objects._suspended["job-1"], objects._generations["job-1"] = False, 1
    document = job_document("PyTorchJob", "obj", {"Master": replica(1)})
    document["metadata"]["uid"] = "job-1"
    job = parse_job(document)
    patched = asyncio.create_task(objects._follow_suspension(job, True))
    await api.asked.wait()
    # The event of the patch arrives before its answer, then an older one late.
    await objects._on_object(
        "pytorchjobs", "MODIFIED", _object("job-1", "cr-1", generation=2, suspend=True)
    )
    api.answer.set()
    await patched
    await objects._on_object("pytorchjobs", "MODIFIED", _object("job-1", "cr-1", suspend=False))
    assert api.patches == [{"spec": {"runPolicy": {"suspend": True}}}]
    assert objects.news.empty()


class _NothingThere:
    """An API whose every read answers 404."""

    custom = SimpleNamespace(get_namespaced_custom_object=None)

    async def call(self, *args: Any, **kw: Any) -> dict[str, Any]:
        raise KubeNotFound("not found", 404, "NotFound")


async def test_an_object_gone_while_no_worker_watched_is_found_missing_at_adoption() -> None:
    """A restarted worker lists the job's objects (adoption): the owner they name is gone,
    so the run's object is not made again and the loss is told."""
    objects = JobObjects(cast(KubeApi, _NothingThere()), "east")
    objects.served = {"PyTorchJob"}
    owner = JobObjectRef("PyTorchJob", "default", "obj", "cr-1").owner_reference()
    pod = {
        "metadata": {
            "name": "obj-master-0",
            "namespace": "default",
            "labels": {LABEL_JOB_UID: "job-1", LABEL_ATTEMPT: "2"},
            "ownerReferences": [owner],
        }
    }
    objects.note_owners([pod])
    document = job_document("PyTorchJob", "obj", {"Master": replica(1)})
    document["metadata"]["uid"] = "job-1"
    assert await objects.ensure(parse_job(document), 2) is None
    assert objects.news.get_nowait() == JobObjectLost("job-1", 2, "PyTorchJob obj")
    assert await objects.ensure(parse_job(document), 2) is None  # asked again: no API call
    assert objects.news.empty()
