"""What a delegated job's object says, as trainhub's status: its conditions and replica
statuses taken as the member's operator wrote them, and the phase they mean. Rules without
I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from schemas.status import ConditionType, JobCondition, JobPhase, JobStatus

_PHASES = (
    (ConditionType.FAILED, JobPhase.FAILED),
    (ConditionType.SUCCEEDED, JobPhase.SUCCEEDED),
    (ConditionType.SUSPENDED, JobPhase.SUSPENDED),
    (ConditionType.RESTARTING, JobPhase.RESTARTING),
    (ConditionType.RUNNING, JobPhase.RUNNING),
    (ConditionType.CREATED, JobPhase.CREATED),
)
"""Which true condition decides the phase, strongest first: an ended job stays ended, a
suspended one is suspended whatever else is still true."""


def parse_status(raw: Mapping[str, Any] | None) -> JobStatus | None:
    """The object's `.status` as a JobStatus; None while the operator has written no
    condition yet (or wrote something that is not a status)."""
    if not raw or not raw.get("conditions"):
        return None
    try:
        return JobStatus.model_validate(raw)
    except ValidationError:
        return None


def phase_of(status: JobStatus) -> JobPhase:
    """The phase the conditions mean (Created while none of them is true yet)."""
    return next((phase for ctype, phase in _PHASES if status.is_true(ctype)), JobPhase.CREATED)


def deciding_condition(status: JobStatus) -> JobCondition | None:
    """The condition behind `phase_of`: its reason and message tell the phase."""
    for ctype, _ in _PHASES:
        condition = status.condition(ctype)
        if condition is not None and condition.status == "True":
            return condition
    return None


def same_status(a: JobStatus, b: JobStatus) -> bool:
    """Whether publishing `b` after `a` would tell nothing new (the operator's
    lastReconcileTime moves on every pass, which is not news)."""
    exclude = {"lastReconcileTime"}
    return a.model_dump(exclude=exclude) == b.model_dump(exclude=exclude)
