"""The slice of the Kubernetes Pod API that training jobs use; unknown pod fields pass through."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.quantity import ResourceList


class _Open(BaseModel):
    """Kubernetes objects have many fields we do not interpret: keep them as they came."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class EnvVar(_Open):
    name: str = Field(min_length=1, max_length=253)
    value: str | None = None
    valueFrom: dict[str, Any] | None = None


class ContainerPort(_Open):
    name: str | None = None
    containerPort: int = Field(ge=1, le=65535)
    protocol: str | None = None


class ResourceRequirements(_Open):
    requests: ResourceList | None = None
    limits: ResourceList | None = None


class Container(_Open):
    name: str = Field(min_length=1, max_length=63)
    image: str = Field(min_length=1, max_length=1024)
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    ports: list[ContainerPort] | None = None
    resources: ResourceRequirements | None = None
    workingDir: str | None = None

    @field_validator("image")
    @classmethod
    def _image_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("container image must not be blank")
        return value

    def effective_requests(self) -> dict[str, Decimal]:
        """Requests as the scheduler sees them: limits stand in for missing requests."""
        if self.resources is None:
            return {}
        merged = dict(self.resources.limits or {})
        merged.update(self.resources.requests or {})
        return merged


class Toleration(_Open):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    tolerationSeconds: int | None = None


class PodSpec(_Open):
    containers: list[Container] = Field(min_length=1)
    initContainers: list[Container] | None = None
    restartPolicy: Literal["Always", "OnFailure", "Never"] | None = None
    nodeSelector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    affinity: dict[str, Any] | None = None

    def total_requests(self) -> dict[str, Decimal]:
        """What the scheduler reserves for this pod: the sum over containers, or the largest
        init container where that is bigger (init containers run one at a time)."""
        total: dict[str, Decimal] = {}
        for container in self.containers:
            _add(total, container.effective_requests())
        for init in self.initContainers or []:
            for name, amount in init.effective_requests().items():
                total[name] = max(total.get(name, Decimal(0)), amount)
        return total


def _add(total: dict[str, Decimal], extra: dict[str, Decimal]) -> None:
    for name, amount in extra.items():
        total[name] = total.get(name, Decimal(0)) + amount


class TemplateMeta(_Open):
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodTemplateSpec(_Open):
    metadata: TemplateMeta = Field(default_factory=TemplateMeta)
    spec: PodSpec
