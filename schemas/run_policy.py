"""Kubeflow `runPolicy`: cleanup, deadlines, retries, gang scheduling, suspension, ownership."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.quantity import ResourceList

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

TRAINHUB_MANAGER = "trainhub.io/dispatcher"
"""The `runPolicy.managedBy` value that hands a job to trainhub."""
KNOWN_MANAGERS = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue", TRAINHUB_MANAGER)
"""The controllers `runPolicy.managedBy` may name: upstream's webhook refuses any other value
(a typo of ours would otherwise read as someone else's job, skipped without a word)."""


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

    @field_validator("managedBy")
    @classmethod
    def _known_manager(cls, value: str | None) -> str | None:
        if value is not None and value not in KNOWN_MANAGERS:
            supported = ", ".join(repr(m) for m in KNOWN_MANAGERS)
            raise ValueError(f"unsupported value; supported values: {supported}")
        return value

    @property
    def managed_by_trainhub(self) -> bool:
        return self.managedBy == TRAINHUB_MANAGER
