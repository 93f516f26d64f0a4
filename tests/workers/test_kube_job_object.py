"""The job's own Kubeflow object in direct mode, without a cluster: its status in the
Training Operator's shape, and the ownerReferences that lead back to it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from schemas.status import JobCondition, JobStatus, ReplicaStatus
from workers.backends.kube_job_object import JobObjectRef, owned_by_job_object, status_body


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
