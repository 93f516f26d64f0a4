"""Job status as the Training Operator reports it, plus trainhub's lifecycle phase."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ConditionType(StrEnum):
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    COMPLETE = "Complete"
    """TrainJob's (Kubeflow Trainer v2) name for Succeeded."""


class JobCondition(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    lastUpdateTime: datetime | None = None
    lastTransitionTime: datetime | None = None


class ReplicaStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    active: int = 0
    succeeded: int = 0
    failed: int = 0
    selector: str | None = None


class ReplicatedJobStatus(BaseModel):
    """One entry of a TrainJob's `status.jobsStatus` (Kubeflow Trainer's JobStatus, as its
    controller copies it from the JobSet's `replicatedJobsStatus`): how many of the replicated
    job's child Jobs (one here) are ready, succeeded, failed, active or suspended."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    ready: int = Field(default=0, ge=0)
    succeeded: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    active: int = Field(default=0, ge=0)
    suspended: int = Field(default=0, ge=0)


class JobStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    conditions: list[JobCondition] = Field(default_factory=list)
    replicaStatuses: dict[str, ReplicaStatus] = Field(default_factory=dict)
    jobsStatus: list[ReplicatedJobStatus] | None = None
    """A TrainJob's only (see ReplicatedJobStatus); None for the v1 kinds."""
    startTime: datetime | None = None
    completionTime: datetime | None = None
    lastReconcileTime: datetime | None = None

    def condition(self, ctype: str) -> JobCondition | None:
        return next((c for c in self.conditions if c.type == ctype), None)

    def is_true(self, ctype: str) -> bool:
        found = self.condition(ctype)
        return found is not None and found.status == "True"


class JobPhase(StrEnum):
    """Where a job is in trainhub's lifecycle (the hub's ledger and every status event)."""

    QUEUED = "Queued"
    SKIPPED = "Skipped"
    REJECTED = "Rejected"
    ASSIGNED = "Assigned"
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DELETED = "Deleted"

    @property
    def finished(self) -> bool:
        return self in _FINISHED


ALREADY_EXISTS = "AlreadyExists"
"""The reason of the hub's answer to a submission it refused because the job exists: the
update carries the existing job's phase but changes nothing about it."""

INVALID = "Invalid"
"""The reason of the Rejected status answering a submission whose job is invalid (schema, or
constraints that no cluster could read). Such a job never exists, as an object the apiserver
refuses: its name stays free for a corrected submission, also after a hub restart."""

TTL_EXPIRED = "TTLExpired"
"""The reason of the Deleted status the hub publishes when a job's ttlSecondsAfterFinished ran
out: unlike a deletion by its owner, the job had finished, and its outcome still stands."""

_FINISHED = {
    JobPhase.SKIPPED,
    JobPhase.REJECTED,
    JobPhase.SUCCEEDED,
    JobPhase.FAILED,
    JobPhase.DELETED,
}
