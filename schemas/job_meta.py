"""What every job document shares, whatever its API group: metadata, the uid a job is known
by on the bus, and the replica spec (one pod template, a count and a restart policy)."""

from __future__ import annotations

import functools
import re
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.names import DNS1123_LABEL
from schemas.pod import PodTemplateSpec

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# uuid5 namespace for jobs whose producer set no uid: the same namespace/name is the same job.
_JOB_UID_NAMESPACE = uuid.UUID("6f1d4c62-3f0e-4b8e-9a53-9d7a1f2f7a10")


JOB_UID_CACHE = 16_384
"""Jobs whose derived uid is kept (it is asked for several times per event on the hot path,
uuid5 costs tens of µs). About 290 B each: a bound on memory, not a lifetime, so it is sized
to a burst of jobs in flight (a soak's 10,000), not to every job a process saw: at 65,536 it
grew a hub by about 3 MB per 10,000 jobs for 65,536 jobs, long after they left (#27)."""


@functools.lru_cache(maxsize=JOB_UID_CACHE)
def derive_job_uid(namespace: str, name: str) -> str:
    return str(uuid.uuid5(_JOB_UID_NAMESPACE, f"{namespace}/{name}"))


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(max_length=63)
    namespace: str = Field(default="default", max_length=63)
    uid: str | None = Field(default=None, max_length=128)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None

    @field_validator("name")
    @classmethod
    def _dns1035(cls, value: str) -> str:
        if not _DNS1035.match(value):
            raise ValueError(
                f"job name {value!r} is not a DNS-1035 label (lower-case letters, digits and "
                "'-', starting with a letter, ending with a letter or digit)"
            )
        return value

    @field_validator("namespace")
    @classmethod
    def _dns1123(cls, value: str) -> str:
        if not DNS1123_LABEL.match(value):
            raise ValueError(f"namespace {value!r} is not a DNS-1123 label")
        return value


class ReplicaSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int | None = Field(strict=True, default=None, ge=0, le=10_000)
    template: PodTemplateSpec
    restartPolicy: Literal["Always", "OnFailure", "Never", "ExitCode"] | None = None


ReplicaSpecs = dict[str, ReplicaSpec]
