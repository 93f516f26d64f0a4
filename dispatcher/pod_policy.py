"""Pod security policy: privileged containers, hostPath volumes, hostNetwork and hostPID are
refused on a cluster unless its `policy` allows them.

A job is judged on every pod template it would create; any value other than absent or
`false` counts as asking, so a malformed `hostNetwork: "yes"` is refused rather than missed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from schemas.cluster import ClusterPolicy
from schemas.kubeflow import AnyJob
from schemas.pod import Container, PodSpec

Privilege = Literal["privileged", "hostPath", "hostNetwork", "hostPID"]

_ALLOWED_BY: dict[Privilege, str] = {
    "privileged": "allowPrivileged",
    "hostPath": "allowHostPath",
    "hostNetwork": "allowHostNetwork",
    "hostPID": "allowHostPID",
}
_WHAT: dict[Privilege, str] = {
    "privileged": "privileged containers are",
    "hostPath": "hostPath volumes are",
    "hostNetwork": "hostNetwork is",
    "hostPID": "hostPID is",
}


@dataclass(frozen=True)
class PrivilegeRequest:
    privilege: Privilege
    where: str
    """The field that asks, e.g. `Worker: containers[jax].securityContext.privileged`."""


def _asks(value: object) -> bool:
    return value is not None and value is not False


def _extra(model: PodSpec | Container) -> Mapping[str, Any]:
    # What `model_extra` returns, read directly: that property runs as Python, once per
    # container of every job placed.
    return model.__pydantic_extra__ or {}


def _security_contexts(pod: PodSpec) -> Iterator[tuple[str, object, Any]]:
    """(list, name or index, securityContext) of every container that has one; the field
    path is only spelled out for those that ask, since most jobs ask for nothing."""
    for field_name, listed in (
        ("containers", pod.containers),
        ("initContainers", pod.initContainers),
    ):
        for container in listed or ():
            context = _extra(container).get("securityContext")
            if context is not None:
                yield field_name, container.name, context
    ephemeral = _extra(pod).get("ephemeralContainers")
    if isinstance(ephemeral, list):
        for i, container in enumerate(ephemeral):
            if isinstance(container, Mapping):
                context = container.get("securityContext")
                if context is not None:
                    yield "ephemeralContainers", i, context


def requested_privileges(
    job: AnyJob, making: Collection[str] | None = None
) -> tuple[PrivilegeRequest, ...]:
    """Every place in the pod templates the job makes pods of that asks for a host
    privilege (a replica type of 0 replicas makes none). `making`: the replica types that
    make pods, when the caller has counted them already."""
    found: list[PrivilegeRequest] = []
    for rtype, rspec in job.replica_specs.items():
        makes_pods = rtype in making if making is not None else job.replicas_of(rtype) > 0
        if not makes_pods:
            continue
        pod = rspec.template.spec
        extra = _extra(pod)
        for privilege in ("hostNetwork", "hostPID"):
            if _asks(extra.get(privilege)):
                found.append(PrivilegeRequest(privilege, f"{rtype}: {privilege}"))
        volumes = extra.get("volumes")
        if isinstance(volumes, list):
            for i, volume in enumerate(volumes):
                if isinstance(volume, Mapping) and _asks(volume.get("hostPath")):
                    name = volume.get("name")
                    label = name if isinstance(name, str) and len(name) <= 63 else str(i)
                    where = f"{rtype}: volumes[{label}].hostPath"
                    found.append(PrivilegeRequest("hostPath", where))
        for listed, which, context in _security_contexts(pod):
            where = f"{rtype}: {listed}[{which}].securityContext"
            if isinstance(context, Mapping):
                if _asks(context.get("privileged")):
                    found.append(PrivilegeRequest("privileged", f"{where}.privileged"))
            elif context:
                # Not a mapping at all: Kubernetes would refuse it, and so do we.
                found.append(PrivilegeRequest("privileged", where))
    return tuple(found)


def policy_refusal(requests: tuple[PrivilegeRequest, ...], policy: ClusterPolicy) -> str | None:
    """Why a cluster with `policy` refuses pods asking for `requests`; None when it accepts."""
    refused: dict[Privilege, list[str]] = {}
    for request in requests:
        if not getattr(policy, _ALLOWED_BY[request.privilege]):
            refused.setdefault(request.privilege, []).append(request.where)
    if not refused:
        return None
    parts = []
    for privilege, places in refused.items():
        shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
        parts.append(
            f"{_WHAT[privilege]} not allowed here ({shown}; "
            f"policy.{_ALLOWED_BY[privilege]} is false)"
        )
    return "pod security policy: " + "; ".join(parts)
