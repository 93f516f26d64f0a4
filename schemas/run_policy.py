"""Kubeflow `runPolicy`: cleanup, deadlines, retries, gang scheduling, suspension, ownership."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.quantity import ResourceList

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

TRAINHUB_MANAGER = "trainhub.io/dispatcher"
"""The `runPolicy.managedBy` value that hands a job to trainhub."""


class SchedulingPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    minAvailable: int | None = Field(strict=True, default=None, ge=0)
    queue: str | None = Field(default=None, max_length=253)
    minResources: ResourceList | None = None
    priorityClass: str | None = Field(default=None, max_length=253)
    scheduleTimeoutSeconds: int | None = Field(strict=True, default=None, ge=0)


class RunPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cleanPodPolicy: Literal["All", "Running", "None"] | None = None
    # Upstream's Go types: int32, int64, int32.
    ttlSecondsAfterFinished: int | None = Field(strict=True, default=None, ge=0, le=_INT32_MAX)
    activeDeadlineSeconds: int | None = Field(strict=True, default=None, ge=0, le=_INT64_MAX)
    backoffLimit: int | None = Field(strict=True, default=None, ge=0, le=_INT32_MAX)
    schedulingPolicy: SchedulingPolicy | None = None
    suspend: bool | None = Field(default=None, strict=True)
    managedBy: str | None = Field(default=None, max_length=63)

    @property
    def managed_by_trainhub(self) -> bool:
        return self.managedBy == TRAINHUB_MANAGER
