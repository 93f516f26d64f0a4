"""What an update may change in a job, by where the job stands.

An update replaces a job's whole spec, as a PATCH of the Kubeflow object would. Its pods are
made from the spec when the job is placed, so the spec may change freely while no pods
exist: the job is queued, held suspended by the hub, or suspended in its cluster (the hub
then takes it back, and places it again with the new spec when it is resumed). A job whose
pods exist may only be suspended or resumed (`runPolicy.suspend`); its kind and
`runPolicy.managedBy` never change. A TrainJob follows Kubeflow Trainer v2.0.0's rules besides:
`spec.runtimeRef` is immutable (its CRD's CEL rule), and `spec.podSpecOverrides` may change
only in an update that leaves the TrainJob suspended and while none of its replicated jobs is
still active, by the job's last status (its JobSet plugin's webhook). The hub
applies these rules; the SDK and CLI check them first, so that a refusal is an error at once
rather than a dead letter later.
"""

from __future__ import annotations

from typing import Any

from schemas.job_controls import control_field, job_controls
from schemas.kubeflow import AnyJob
from schemas.status import JobPhase, JobStatus
from schemas.trainjob import TrainJob

RUNNING_PHASES = (JobPhase.ASSIGNED, JobPhase.CREATED, JobPhase.RUNNING, JobPhase.RESTARTING)
"""A job placed and not suspended: its worker runs its pods, or is about to."""
UPDATED = "Updated"
"""The reason of the status that announces an applied update."""


def _without_suspend(job: AnyJob) -> dict[str, Any]:
    document = job.to_document()
    controls = job_controls(document, create=False)
    if controls is not None:
        controls.pop("suspend", None)
    return document


def update_problem(
    current: AnyJob | None,
    phase: JobPhase | None,
    new: AnyJob,
    status: JobStatus | None = None,
) -> str | None:
    """Why `new` cannot replace `current` (a job in `phase`, whose last status is `status`);
    None when it can."""
    key = new.key
    if phase is None or phase == JobPhase.DELETED:
        return f"no job {key} to update (submit it instead)"
    if phase.finished:
        return f"job {key} is {phase.value}: a finished job cannot be updated"
    if current is None:
        return f"job {key} is {phase.value}, but its spec is not known here; nothing to compare"
    if new.kind != current.kind:
        return f"the kind of job {key} is {current.kind}; an update cannot make it a {new.kind}"
    if (new.run_policy.managedBy or "") != (current.run_policy.managedBy or ""):
        return (
            f"{control_field(new.kind, 'managedBy')} is immutable: job {key} is managed by "
            f"{current.run_policy.managedBy or '(unset)'}, the update says "
            f"{new.run_policy.managedBy or '(unset)'}"
        )
    if isinstance(new, TrainJob) and isinstance(current, TrainJob):
        problem = _trainjob_problem(current, new, status)
        if problem is not None:
            return f"TrainJob {key}: {problem}"
    if phase in RUNNING_PHASES and _without_suspend(new) != _without_suspend(current):
        return (
            f"job {key} is {phase.value}: only {control_field(new.kind, 'suspend')} may "
            "change while its pods exist; suspend it, update it, then resume it"
        )
    return None


def _trainjob_problem(current: TrainJob, new: TrainJob, status: JobStatus | None) -> str | None:
    """Upstream's update rules, in its words: the CRD's `self == oldSelf` on runtimeRef and
    the JobSet plugin's check of podSpecOverrides against the new `spec.suspend` and then
    against the replicated jobs still active (its JobSet's status; here the job's last
    status, whose `jobsStatus` the worker copies from the same counts)."""
    if new.spec.runtimeRef != current.spec.runtimeRef:
        return "spec.runtimeRef: Invalid value: runtimeRef is immutable"
    overrides = [o.model_dump(mode="json") for o in new.spec.podSpecOverrides or []]
    before = [o.model_dump(mode="json") for o in current.spec.podSpecOverrides or []]
    if overrides != before and new.spec.suspend is not True:
        return (
            "spec.podSpecOverrides: Forbidden: PodSpecOverrides can only be modified when the "
            "TrainJob is suspended"
        )
    if overrides != before and status is not None:
        active = [job.name for job in status.jobsStatus or [] if job.active > 0]
        if active:
            return "; ".join(
                "spec.podSpecOverrides: Forbidden: PodSpecOverrides cannot be modified when "
                f"the JobSet's ReplicatedJob {name} is still active"
                for name in active
            )
    return None
