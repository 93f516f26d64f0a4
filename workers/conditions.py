"""Kubeflow's condition rules: nothing changes after Failed, Running and Restarting replace
each other, finishing sets Running to False."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.status import ConditionType, JobCondition, JobStatus

_EXCLUSIVE = {
    ConditionType.RUNNING: ConditionType.RESTARTING,
    ConditionType.RESTARTING: ConditionType.RUNNING,
}
_FINISHING = {ConditionType.SUCCEEDED, ConditionType.FAILED}


def _set_false(status: JobStatus, ctype: str, now: datetime) -> None:
    found = status.condition(ctype)
    if found is not None and found.status == "True":
        found.status = "False"
        found.lastUpdateTime = found.lastTransitionTime = now


def set_condition(status: JobStatus, ctype: ConditionType, reason: str, message: str) -> bool:
    """Make `ctype` True; returns False when the rules forbid the change or it is no change."""
    if status.is_true(ConditionType.FAILED):
        return False
    if status.is_true(ConditionType.SUCCEEDED) and ctype != ConditionType.SUCCEEDED:
        return False
    now = datetime.now(UTC)
    found = status.condition(ctype)
    if found is not None and found.status == "True" and found.reason == reason:
        return False
    if ctype in _EXCLUSIVE:
        _set_false(status, _EXCLUSIVE[ctype], now)
    if ctype in _FINISHING:
        _set_false(status, ConditionType.RUNNING, now)
        _set_false(status, ConditionType.RESTARTING, now)
    if found is None:
        status.conditions.append(
            JobCondition(
                type=ctype,
                status="True",
                reason=reason,
                message=message,
                lastUpdateTime=now,
                lastTransitionTime=now,
            )
        )
    else:
        if found.status != "True":
            found.lastTransitionTime = now
        found.status, found.reason, found.message, found.lastUpdateTime = (
            "True",
            reason,
            message,
            now,
        )
    return True
