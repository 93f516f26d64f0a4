"""Delegate mode without a cluster: the object a job becomes for the member's Training
Operator, the phase its conditions mean, and where delegate mode is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from schemas.job_parsing import parse_job
from schemas.status import JobPhase, JobStatus
from tests.workers.job_documents import job_document, replica
from workers.backends.delegated_kinds import TRAINING_OPERATOR
from workers.backends.kube_delegate import KubeDelegateBackend
from workers.backends.kube_job_object import job_object
from workers.backends.registry import BackendRequest, make_backend
from workers.cluster_spec import ClusterSpec
from workers.delegated_status import deciding_condition, parse_status, phase_of, same_status
from workers.gang_scheduling import GangScheduling
from workers.rendering import LABEL_ATTEMPT, LABEL_JOB_UID, LABEL_MANAGED


def _pytorch() -> dict[str, Any]:
    document = job_document(
        "PyTorchJob",
        "obj",
        {"Master": replica(1), "Worker": replica(2, restart_policy="OnFailure")},
        run_policy={"backoffLimit": 3, "cleanPodPolicy": "All"},
    )
    document["metadata"]["uid"] = "producer-uid"
    document["metadata"]["labels"] = {"team": "a"}
    return document


def test_the_object_carries_the_job_s_spec_the_operator_s_managed_by_and_our_labels() -> None:
    job = parse_job(_pytorch())
    obj = job_object(job, 2, TRAINING_OPERATOR)
    assert (obj["apiVersion"], obj["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    ours = {LABEL_MANAGED: "trainhub", LABEL_JOB_UID: "producer-uid", LABEL_ATTEMPT: "2"}
    # The producer's uid is a label, never the object's uid (the apiserver's to give).
    assert obj["metadata"] == {
        "name": "obj",
        "namespace": "default",
        "labels": {"team": "a", **ours},
    }
    policy = obj["spec"]["runPolicy"]
    assert policy == {"managedBy": TRAINING_OPERATOR, "backoffLimit": 3, "cleanPodPolicy": "All"}
    for rtype, count in (("Master", 1), ("Worker", 2)):
        spec = obj["spec"]["pytorchReplicaSpecs"][rtype]
        assert spec["replicas"] == count
        # Every pod the operator makes carries the job's uid: capacity counts it as the job's.
        assert spec["template"]["metadata"]["labels"] == ours
        assert spec["template"]["metadata"]["annotations"] == {"trainhub.io/sim-duration": "0.2s"}
    assert obj["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    assert "status" not in obj
    # The parsed job itself is left as it was.
    assert job.run_policy.managedBy == "trainhub.io/dispatcher"


def test_managed_by_can_be_left_unset() -> None:
    obj = job_object(parse_job(_pytorch()), 1, None)
    assert "managedBy" not in obj["spec"]["runPolicy"]


def _status(*conditions: tuple[str, str]) -> dict[str, Any]:
    return {
        "conditions": [
            {"type": t, "status": s, "reason": f"PyTorchJob{t}", "message": f"{t} {s}"}
            for t, s in conditions
        ],
        "replicaStatuses": {"Master": {"active": 1}},
        "lastReconcileTime": "2026-01-01T00:00:00Z",
    }


@pytest.mark.parametrize(
    ("conditions", "phase"),
    [
        ((("Created", "True"),), JobPhase.CREATED),
        ((("Created", "True"), ("Running", "True")), JobPhase.RUNNING),
        ((("Created", "True"), ("Restarting", "True")), JobPhase.RESTARTING),
        ((("Created", "True"), ("Running", "False"), ("Suspended", "True")), JobPhase.SUSPENDED),
        ((("Created", "True"), ("Running", "False"), ("Succeeded", "True")), JobPhase.SUCCEEDED),
        ((("Created", "True"), ("Running", "True"), ("Failed", "True")), JobPhase.FAILED),
    ],
)
def test_the_phase_is_the_strongest_true_condition(
    conditions: tuple[tuple[str, str], ...], phase: JobPhase
) -> None:
    status = parse_status(_status(*conditions))
    assert status is not None
    assert phase_of(status) == phase
    condition = deciding_condition(status)
    assert condition is not None and condition.reason == f"PyTorchJob{phase.value}"


def test_a_status_without_conditions_tells_nothing_and_reconcile_times_are_not_news() -> None:
    assert parse_status({}) is None
    assert parse_status({"replicaStatuses": {}}) is None
    before = JobStatus.model_validate(_status(("Created", "True")))
    later = _status(("Created", "True"))
    later["lastReconcileTime"] = "2026-01-01T00:01:00Z"
    assert same_status(before, JobStatus.model_validate(later))
    running = _status(("Created", "True"), ("Running", "True"))
    assert not same_status(before, JobStatus.model_validate(running))


def test_delegate_mode_is_kube_only_and_leaves_gangs_to_the_operator(tmp_path: Path) -> None:
    cluster = ClusterSpec(name="east")
    with pytest.raises(ValueError, match="--mode delegate needs --backend kube"):
        make_backend("sim", BackendRequest(cluster, delegate=True))
    kubeconfig = tmp_path / "kubeconfig"
    gang = GangScheduling.of("scheduler-plugins", None)
    with pytest.raises(ValueError, match="leave out --gang-scheduler"):
        make_backend(
            "kube",
            BackendRequest(cluster, kubeconfig=kubeconfig, delegate=True, gang_scheduling=gang),
        )
    backend = make_backend("kube", BackendRequest(cluster, kubeconfig=kubeconfig, delegate=True))
    assert isinstance(backend, KubeDelegateBackend)
    assert backend.managed_by is None  # unset: the operator takes the object as its own
    chosen = BackendRequest(cluster, kubeconfig=kubeconfig, delegate=True, managed_by="x.io/y")
    named = make_backend("kube", chosen)
    assert isinstance(named, KubeDelegateBackend) and named.managed_by == "x.io/y"
    for kind in ("kube", "sim"):
        with pytest.raises(ValueError, match="--delegate-managed-by needs --mode delegate"):
            make_backend(kind, BackendRequest(cluster, kubeconfig=kubeconfig, managed_by="x"))
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "default"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "managedBy": "trainhub.io/dispatcher",
        },
    }
    refusal = backend.delegates(parse_job(trainjob))
    assert refusal is not None and "TrainJob is not one" in refusal
    assert backend.delegates(parse_job(_pytorch())) is None
