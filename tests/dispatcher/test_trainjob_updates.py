"""What an update may change in a TrainJob: Kubeflow Trainer v2.0.0's rules (the TrainJob
CRD's `runtimeRef is immutable` and `ManagedBy value is immutable` CEL rules, and its JobSet
plugin's `PodSpecOverrides can only be modified when the TrainJob is suspended` and `... when
the JobSet's ReplicatedJob X is still active`), besides
trainhub's own (a job whose pods exist changes only its suspend)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dispatcher.job_updates import update_problem
from schemas.job_parsing import parse_job
from schemas.status import JobPhase, JobStatus, ReplicatedJobStatus

OVERRIDE = {"targetJobs": [{"name": "node"}], "tolerations": [{"key": "x", "operator": "Exists"}]}


def trainjob(runtime: str = "torch-distributed", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "default"},
        "spec": {
            "runtimeRef": {"name": runtime},
            "managedBy": "trainhub.io/dispatcher",
            "trainer": {"numNodes": 2},
            **spec,
        },
    }


def problem(
    current: dict[str, Any],
    phase: JobPhase,
    new: dict[str, Any],
    status: JobStatus | None = None,
) -> str | None:
    return update_problem(parse_job(current), phase, parse_job(new), status)


@pytest.mark.parametrize("phase", [JobPhase.QUEUED, JobPhase.SUSPENDED, JobPhase.RUNNING])
@pytest.mark.parametrize("suspend", [True, False])
def test_runtime_ref_is_immutable_whatever_the_phase(phase: JobPhase, suspend: bool) -> None:
    current = trainjob(suspend=phase == JobPhase.SUSPENDED)
    new = trainjob("plain-distributed", suspend=suspend)
    assert problem(current, phase, new) == (
        "TrainJob default/tj: spec.runtimeRef: Invalid value: runtimeRef is immutable"
    )
    # The same runtime written with its defaults is no change.
    same = trainjob(suspend=suspend)
    same["spec"]["runtimeRef"] |= {
        "kind": "ClusterTrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    assert problem(current, JobPhase.SUSPENDED, same) is None


def test_pod_spec_overrides_change_only_in_an_update_that_keeps_it_suspended() -> None:
    suspended = trainjob(suspend=True)
    changed = trainjob(suspend=True, podSpecOverrides=[OVERRIDE])
    assert problem(suspended, JobPhase.SUSPENDED, changed) is None
    resumed_with_change = trainjob(suspend=False, podSpecOverrides=[OVERRIDE])
    refused = (
        "TrainJob default/tj: spec.podSpecOverrides: Forbidden: PodSpecOverrides can only be "
        "modified when the TrainJob is suspended"
    )
    assert problem(suspended, JobPhase.SUSPENDED, resumed_with_change) == refused
    # Not suspended: refused even before it is placed (upstream's webhook asks spec.suspend).
    assert problem(trainjob(), JobPhase.QUEUED, trainjob(podSpecOverrides=[OVERRIDE])) == refused
    # Running: upstream's words first, for the field upstream guards.
    assert problem(trainjob(), JobPhase.RUNNING, trainjob(podSpecOverrides=[OVERRIDE])) == refused
    # Removing them is a change too.
    with_overrides = trainjob(suspend=True, podSpecOverrides=[OVERRIDE])
    assert problem(with_overrides, JobPhase.SUSPENDED, trainjob(suspend=False)) == refused
    assert problem(with_overrides, JobPhase.SUSPENDED, trainjob(suspend=True)) is None


def test_managed_by_is_immutable_and_the_trainer_changes_while_suspended() -> None:
    current = trainjob(suspend=True)
    other = copy.deepcopy(current)
    other["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert "spec.managedBy is immutable" in (problem(current, JobPhase.SUSPENDED, other) or "")
    bigger = trainjob(suspend=False)
    bigger["spec"]["trainer"]["numNodes"] = 4
    assert problem(current, JobPhase.SUSPENDED, bigger) is None
    # Pods exist: only spec.suspend may change (trainhub's rule for every kind).
    running = problem(trainjob(), JobPhase.RUNNING, bigger)
    assert running is not None and "only spec.suspend may change" in running


def jobs_status(**active: int) -> JobStatus:
    """A last status whose replicated jobs have these `active` counts."""
    return JobStatus(
        jobsStatus=[ReplicatedJobStatus(name=name, active=n) for name, n in active.items()]
    )


def test_pod_spec_overrides_wait_until_no_replicated_job_is_active() -> None:
    """The suspension asked in the same update as the change: upstream then looks at the
    JobSet's replicated jobs and refuses while one is still active (one error each)."""
    running = trainjob()
    suspend_and_change = trainjob(suspend=True, podSpecOverrides=[OVERRIDE])
    both = problem(
        running,
        JobPhase.RUNNING,
        suspend_and_change,
        jobs_status(**{"dataset-initializer": 0, "model-initializer": 1, "node": 2}),
    )
    assert both == (
        "TrainJob default/tj: spec.podSpecOverrides: Forbidden: PodSpecOverrides cannot be "
        "modified when the JobSet's ReplicatedJob model-initializer is still active; "
        "spec.podSpecOverrides: Forbidden: PodSpecOverrides cannot be modified when the "
        "JobSet's ReplicatedJob node is still active"
    )
    # Suspended in its cluster: the worker reported every count at 0, so the change applies.
    suspended = trainjob(suspend=True)
    assert problem(suspended, JobPhase.SUSPENDED, suspend_and_change, jobs_status(node=0)) is None
    # Suspending alone is always allowed, active or not.
    assert problem(running, JobPhase.RUNNING, trainjob(suspend=True), jobs_status(node=2)) is None
    # A status without jobsStatus (not placed yet) has nothing active.
    assert problem(trainjob(suspend=True), JobPhase.QUEUED, suspend_and_change, JobStatus()) is None
