"""The slice of the Kubernetes Pod API that training jobs use; unknown pod fields pass through."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.names import DNS1123_LABEL
from schemas.quantity import ResourceList


class _Open(BaseModel):
    """Kubernetes objects have many fields we do not interpret: keep them as they came."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class EnvVar(_Open):
    name: str = Field(min_length=1, max_length=253)
    value: str | None = None
    valueFrom: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _printable_without_equals(cls, value: str) -> str:
        # The apiserver's (relaxed, since 1.32) rule: printable ASCII, no '='.
        if "=" in value or not all(" " <= c <= "~" for c in value):
            raise ValueError(f"an env var name is printable ASCII without '=' (got {value!r})")
        return value


class ContainerPort(_Open):
    name: str | None = None
    containerPort: int = Field(strict=True, ge=1, le=65535)
    hostPort: int | None = Field(default=None, strict=True, ge=0, le=65535)
    """0 or absent: none (on the host network the apiserver makes it `containerPort`)."""
    protocol: Literal["TCP", "UDP", "SCTP"] | None = None

    @field_validator("name")
    @classmethod
    def _service_name(cls, value: str | None) -> str | None:
        # IANA_SVC_NAME: at most 15 of [a-z0-9-], a letter among them, no '--'.
        if value is not None and not (
            len(value) <= 15
            and DNS1123_LABEL.match(value)
            and "--" not in value
            and any(c.isalpha() for c in value)
        ):
            raise ValueError(
                f"a port name is at most 15 lowercase letters, digits and '-', with a letter "
                f"(got {value!r})"
            )
        return value


class ResourceRequirements(_Open):
    requests: ResourceList | None = None
    limits: ResourceList | None = None

    @model_validator(mode="after")
    def _as_the_apiserver_checks(self) -> ResourceRequirements:
        """The apiserver's rules, checked at submission rather than when the first pod is
        refused: a request is at most its limit; an extended resource (`vendor/name`) is
        a whole number and cannot be overcommitted, so its request needs an equal limit."""
        requests, limits = self.requests or {}, self.limits or {}
        for name, amount in {**limits, **requests}.items():
            if is_extended_resource(name) and amount != amount.to_integral_value():
                raise ValueError(f"{name}: an extended resource is a whole number (got {amount})")
        for name, amount in requests.items():
            limit = limits.get(name)
            if limit is not None and amount > limit:
                raise ValueError(f"requests.{name} ({amount}) is more than limits.{name} ({limit})")
            if is_extended_resource(name) and limit != amount:
                raise ValueError(
                    f"requests.{name}: an extended resource needs limits.{name} equal to its "
                    f"request (got {'none' if limit is None else limit}): it cannot be "
                    "overcommitted"
                )
        return self


def is_extended_resource(name: str) -> bool:
    """Not one of Kubernetes' own resources (cpu, memory, hugepages-*, kubernetes.io/...)."""
    return "/" in name and not name.startswith(("kubernetes.io/", "requests."))


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

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not DNS1123_LABEL.match(value):
            raise ValueError(
                f"a container name is a DNS label: lowercase letters, digits and '-' "
                f"(got {value!r})"
            )
        return value

    @model_validator(mode="after")
    def _port_names_differ(self) -> Container:
        names = [p.name for p in self.ports or () if p.name]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"ports: the name {twice[0]!r} is given twice in one container")
        return self

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
    tolerationSeconds: int | None = Field(default=None, strict=True)

    @model_validator(mode="after")
    def _as_the_apiserver_checks(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError(f"value must be empty with operator Exists (got {self.value!r})")
        if not self.key and self.operator != "Exists":
            raise ValueError("operator must be Exists when key is empty (it tolerates all)")
        return self


class PodSpec(_Open):
    containers: list[Container] = Field(min_length=1)
    initContainers: list[Container] | None = None
    restartPolicy: Literal["Always", "OnFailure", "Never"] | None = None
    nodeSelector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    affinity: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _host_network_ports(self) -> PodSpec:
        """The apiserver's rule: on the host network a port is the host's, one number."""
        if (self.model_extra or {}).get("hostNetwork") is not True:
            return self
        for container in [*(self.initContainers or ()), *self.containers]:
            for port in container.ports or ():
                if port.hostPort and port.hostPort != port.containerPort:
                    raise ValueError(
                        f"container {container.name!r}: hostPort must equal containerPort "
                        f"when hostNetwork is true (got {port.hostPort} and "
                        f"{port.containerPort})"
                    )
        return self

    @model_validator(mode="after")
    def _container_names_differ(self) -> PodSpec:
        names = [c.name for c in [*self.containers, *(self.initContainers or ())]]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"containers: the name {twice[0]!r} is given twice in one pod")
        return self

    def total_requests(
        self, added_init: Iterable[Mapping[str, Decimal]] = ()
    ) -> dict[str, Decimal]:
        """What the scheduler reserves for this pod (see `scheduled_requests`), with
        `added_init`: the requests of init containers the operator adds after the pod's own."""
        if not self.initContainers and added_init == ():
            # Most pods: the containers summed, as `scheduled_requests` sums them (placement
            # reads every job placed; the generators cost more than the sums).
            total: dict[str, Decimal] = {}
            for container in self.containers:
                _add(total, container.effective_requests())
            return total
        own = [
            (i.effective_requests(), (i.model_extra or {}).get("restartPolicy") == "Always")
            for i in self.initContainers or []
        ]
        return scheduled_requests(
            (c.effective_requests() for c in self.containers),
            [*own, *((requests, False) for requests in added_init)],
        )


def scheduled_requests(
    containers: Iterable[Mapping[str, Decimal]],
    init_containers: Iterable[tuple[Mapping[str, Decimal], bool]],
) -> dict[str, Decimal]:
    """What the scheduler reserves for a pod, per resource: its containers summed, or where
    bigger an init container's, init containers running one at a time. A sidecar (an init
    container with restartPolicy Always, flagged True) keeps running: it adds to the
    containers, and to every init container started after it."""
    total: dict[str, Decimal] = {}
    for requests in containers:
        _add(total, requests)
    sidecars: dict[str, Decimal] = {}
    peak: dict[str, Decimal] = {}
    for requests, sidecar in init_containers:
        if sidecar:
            _add(total, requests)
            _add(sidecars, requests)
            running = dict(sidecars)
        else:
            running = dict(requests)
            _add(running, sidecars)
        for name, amount in running.items():
            peak[name] = max(peak.get(name, Decimal(0)), amount)
    for name, amount in peak.items():
        total[name] = max(total.get(name, Decimal(0)), amount)
    return total


def _add(total: dict[str, Decimal], extra: Mapping[str, Decimal]) -> None:
    for name, amount in extra.items():
        total[name] = total.get(name, Decimal(0)) + amount


class TemplateMeta(_Open):
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodTemplateSpec(_Open):
    metadata: TemplateMeta = Field(default_factory=TemplateMeta)
    spec: PodSpec
