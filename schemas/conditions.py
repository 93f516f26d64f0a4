"""Job conditions: the rules every kind shares (nothing changes after Failed, nor after
Succeeded or Complete; Running and Restarting replace each other; finishing sets Running to
False) and each kind's words for the steps of a job's life (`JobStep`): the Training
Operator's for the v1 kinds, Kubeflow Trainer's for TrainJob. The condition set last is the
last in the list, so `conditions[-1]` always tells the latest news."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal, Protocol

from schemas.status import ConditionType, JobCondition, JobStatus

ConditionValue = Literal["True", "False"]

_REPLACES: dict[str, str] = {
    ConditionType.RUNNING: ConditionType.RESTARTING,
    ConditionType.RESTARTING: ConditionType.RUNNING,
}
_SUCCEEDED = (ConditionType.SUCCEEDED, ConditionType.COMPLETE)
_FINISHING = {*_SUCCEEDED, ConditionType.FAILED}
# Upstream leaves Restarting as it was when a job finishes; a finished job that still reads
# "restarting" confuses every client that asks, so it goes False with Running.
_STOPPED_BY_FINISHING = {ConditionType.RUNNING, ConditionType.RESTARTING}


def set_condition(
    status: JobStatus,
    ctype: str,
    reason: str,
    message: str,
    *,
    value: ConditionValue = "True",
    now: datetime | None = None,
) -> bool:
    """Set `ctype` to `value`; returns False when the rules forbid the change or it is none."""
    if status.is_true(ConditionType.FAILED):
        return False
    done = next((t for t in _SUCCEEDED if status.is_true(t)), None)
    if done is not None and ctype != done:
        return False
    found = status.condition(ctype)
    if found is not None and found.status == value and found.reason == reason:
        return False
    now = now or datetime.now(UTC)
    transition = found.lastTransitionTime if found and found.status == value else now
    kept: list[JobCondition] = []
    for condition in status.conditions:
        if condition.type == ctype or condition.type == _REPLACES.get(ctype):
            continue
        if (
            ctype in _FINISHING
            and value == "True"
            and condition.type in _STOPPED_BY_FINISHING
            and condition.status == "True"
        ):
            condition.status = "False"
            condition.lastUpdateTime = condition.lastTransitionTime = now
        kept.append(condition)
    kept.append(
        JobCondition(
            type=ctype,
            status=value,
            reason=reason,
            message=message,
            lastUpdateTime=now,
            lastTransitionTime=transition,
        )
    )
    status.conditions = kept
    return True


class JobStep(StrEnum):
    """A step of a job's life that its controller marks with a condition (or, in some kinds'
    words, with none)."""

    CREATED = "Created"
    CREATION_FAILED = "CreationFailed"
    """The cluster refused the job's objects for good."""
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class StepCondition:
    type: str
    reason: str
    message: str
    value: ConditionValue = "True"


class ConditionWords(Protocol):
    def condition(self, step: JobStep, kind: str, name: str, detail: str) -> StepCondition | None:
        """The condition `step` sets on job `name`; `detail`: why it restarts or failed."""
        ...


class KubeflowConditions:
    """The Training Operator v1's: a condition per step, reason `<Kind><Step>`, messages
    `<Kind> <name> is <step>.`"""

    _STEPS: dict[JobStep, tuple[ConditionType, ConditionValue, str]] = {
        JobStep.CREATED: (ConditionType.CREATED, "True", "created"),
        JobStep.RUNNING: (ConditionType.RUNNING, "True", "running"),
        JobStep.RESTARTING: (ConditionType.RESTARTING, "True", ""),
        JobStep.SUSPENDED: (ConditionType.SUSPENDED, "True", "suspended"),
        JobStep.RESUMED: (ConditionType.SUSPENDED, "False", "resumed"),
        JobStep.SUCCEEDED: (ConditionType.SUCCEEDED, "True", "successfully completed"),
        JobStep.FAILED: (ConditionType.FAILED, "True", ""),
    }

    def condition(self, step: JobStep, kind: str, name: str, detail: str) -> StepCondition | None:
        if step not in self._STEPS:
            return None  # the operator marks a refusal only by failing the job
        ctype, value, word = self._STEPS[step]
        message = detail if not word else f"{kind} {name} is {word}."
        return StepCondition(ctype.value, f"{kind}{step.value}", message, value)


# Kubeflow Trainer v2.0.0's words (pkg/apis/trainer/v1alpha1, pkg/constants), and JobSet's
# for the terminal conditions, which the TrainJob controller copies from its JobSet.
JOBS_CREATION_SUCCEEDED = "JobsCreationSucceeded"
JOBS_CREATION_SUCCEEDED_MESSAGE = "Succeeded to create Jobs"
JOBS_CREATION_FAILED = "JobsCreationFailed"
JOBS_CREATION_FAILED_MESSAGE = "Failed to create Jobs"
TRAINJOB_SUSPENDED_MESSAGE = "TrainJob is suspended"
TRAINJOB_RESUMED_MESSAGE = "TrainJob is resumed"
ALL_JOBS_COMPLETED = "AllJobsCompleted"
ALL_JOBS_COMPLETED_MESSAGE = "jobset completed successfully"
FAILED_JOBS = "FailedJobs"
FAILED_JOBS_MESSAGE = "jobset failed due to one or more job failures"


class TrainerConditions:
    """Kubeflow Trainer's TrainJob: Created once its jobs exist (False with JobsCreationFailed
    when the cluster refused them), Suspended (False with Resumed once resumed), then Complete
    or Failed; no Running or Restarting condition (the phase says those)."""

    _STEPS: dict[JobStep, StepCondition] = {
        JobStep.CREATED: StepCondition(
            ConditionType.CREATED.value, JOBS_CREATION_SUCCEEDED, JOBS_CREATION_SUCCEEDED_MESSAGE
        ),
        JobStep.CREATION_FAILED: StepCondition(
            ConditionType.CREATED.value,
            JOBS_CREATION_FAILED,
            JOBS_CREATION_FAILED_MESSAGE,
            "False",
        ),
        JobStep.SUSPENDED: StepCondition(
            ConditionType.SUSPENDED.value, "Suspended", TRAINJOB_SUSPENDED_MESSAGE
        ),
        JobStep.RESUMED: StepCondition(
            ConditionType.SUSPENDED.value, "Resumed", TRAINJOB_RESUMED_MESSAGE, "False"
        ),
        JobStep.SUCCEEDED: StepCondition(
            ConditionType.COMPLETE.value, ALL_JOBS_COMPLETED, ALL_JOBS_COMPLETED_MESSAGE
        ),
    }

    def condition(self, step: JobStep, kind: str, name: str, detail: str) -> StepCondition | None:
        if step == JobStep.FAILED:
            message = f"{FAILED_JOBS_MESSAGE}: {detail}" if detail else FAILED_JOBS_MESSAGE
            return StepCondition(ConditionType.FAILED.value, FAILED_JOBS, message)
        return self._STEPS.get(step)


_WORDS: dict[str, ConditionWords] = {"TrainJob": TrainerConditions()}
_DEFAULT_WORDS = KubeflowConditions()


def condition_words(kind: str | None) -> ConditionWords:
    """The words of `kind`'s controller (the Training Operator's unless it says otherwise)."""
    return _WORDS.get(kind or "", _DEFAULT_WORDS)


def mark_step(
    status: JobStatus,
    step: JobStep,
    kind: str,
    name: str,
    detail: str = "",
    *,
    now: datetime | None = None,
) -> bool:
    """Set the condition `kind`'s controller sets at `step`; True when it changed."""
    found = condition_words(kind).condition(step, kind, name, detail)
    if found is None:
        return False
    return set_condition(
        status, found.type, found.reason, found.message, value=found.value, now=now
    )
