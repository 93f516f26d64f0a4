"""Kubeflow's condition rules: nothing changes after Failed (nor after Succeeded), Running and
Restarting replace each other, finishing sets Running to False. The condition set last is the
last in the list, so `conditions[-1]` always tells the latest news."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from schemas.status import ConditionType, JobCondition, JobStatus

ConditionValue = Literal["True", "False"]

_REPLACES = {
    ConditionType.RUNNING: ConditionType.RESTARTING,
    ConditionType.RESTARTING: ConditionType.RUNNING,
}
_FINISHING = {ConditionType.SUCCEEDED, ConditionType.FAILED}
# Upstream leaves Restarting as it was when a job finishes; a finished job that still reads
# "restarting" confuses every client that asks, so it goes False with Running.
_STOPPED_BY_FINISHING = {ConditionType.RUNNING, ConditionType.RESTARTING}


def set_condition(
    status: JobStatus,
    ctype: ConditionType,
    reason: str,
    message: str,
    *,
    value: ConditionValue = "True",
    now: datetime | None = None,
) -> bool:
    """Set `ctype` to `value`; returns False when the rules forbid the change or it is none."""
    if status.is_true(ConditionType.FAILED):
        return False
    if status.is_true(ConditionType.SUCCEEDED) and ctype != ConditionType.SUCCEEDED:
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
