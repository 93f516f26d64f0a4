"""A container's environment and command line as the kubelet would hand them over, for
backends that run pods as local processes: `$(VAR)` references expanded (`$$` escapes one),
and the downward API's pod fields answered for a pod that lives on 127.0.0.1."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from schemas.pod import Container
from schemas.quantity import parse_quantity
from workers.rendering import PodPlan

LOCAL_IP = "127.0.0.1"
_META_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class UnresolvableEnv(ValueError):
    """A variable the kubelet would refuse to start the container without."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' expansion: `$(NAME)` becomes the value of an already defined NAME (an
    undefined one stays as written), `$$` becomes `$`, any other `$` stays."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        ahead = text[i + 1] if i + 1 < len(text) else ""
        if char != "$" or ahead not in ("$", "("):
            out.append(char)
            i += 1
        elif ahead == "$":
            out.append("$")
            i += 2
        else:
            end = text.find(")", i + 2)
            if end < 0:  # unterminated: the rest is literal
                out.append(text[i:])
                break
            name = text[i + 2 : end]
            out.append(env[name] if name and name in env else text[i : end + 1])
            i = end + 1
    return "".join(out)


@dataclass
class ProcessSpec:
    """What to run for a container: its expanded argv and its own variables."""

    argv: list[str]
    env: dict[str, str]
    warnings: list[str] = field(default_factory=list)


def process_spec(pod: PodPlan, container: Container, node: str) -> ProcessSpec:
    """The container's variables in order, each expanded against those before it, then its
    command and args expanded against all of them."""
    env: dict[str, str] = {}
    warnings: list[str] = []
    for var in container.env or []:
        if var.valueFrom is not None:
            value = _value_from(pod, container, node, var.name, var.valueFrom, warnings)
            if value is not None:
                env[var.name] = value
        else:
            env[var.name] = expand(var.value or "", env)
    argv = [expand(arg, env) for arg in [*(container.command or []), *(container.args or [])]]
    return ProcessSpec(argv, env, warnings)


def _value_from(
    pod: PodPlan,
    container: Container,
    node: str,
    name: str,
    source: Mapping[str, Any],
    warnings: list[str],
) -> str | None:
    if "fieldRef" in source:
        path = str((source["fieldRef"] or {}).get("fieldPath", ""))
        value = field_value(pod, node, path)
        if value is None:
            raise UnresolvableEnv(f"env {name}: unsupported fieldRef.fieldPath {path!r}")
        return value
    if "resourceFieldRef" in source:
        value = _resource_value(pod, container, source["resourceFieldRef"] or {})
        if value is None:
            warnings.append(f"env {name}: the resource has no request or limit here; left unset")
        return value
    for kind in ("secretKeyRef", "configMapKeyRef"):
        if kind in source:
            if (source[kind] or {}).get("optional"):
                warnings.append(f"env {name}: optional {kind} left unset on the local backend")
                return None
            raise UnresolvableEnv(f"env {name}: {kind} cannot be read on the local backend")
    raise UnresolvableEnv(f"env {name}: unsupported valueFrom {sorted(source)}")


def field_value(pod: PodPlan, node: str, path: str) -> str | None:
    """The downward API's pod fields, for a pod whose IPs are the machine's loopback."""
    simple = {
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "spec.nodeName": node,
        "spec.serviceAccountName": str(getattr(pod.spec, "serviceAccountName", None) or "default"),
        "status.podIP": LOCAL_IP,
        "status.podIPs": LOCAL_IP,
        "status.hostIP": LOCAL_IP,
        "status.hostIPs": LOCAL_IP,
    }
    if path in simple:
        return simple[path]
    keyed = _META_KEY.match(path)
    if keyed is not None:
        source = pod.labels if keyed.group(1) == "labels" else pod.annotations
        return source.get(keyed.group(2), "")
    return None


def _resource_value(pod: PodPlan, container: Container, ref: Mapping[str, Any]) -> str | None:
    """`limits.cpu`, `requests.memory`, ...: rounded up in units of the divisor."""
    named = ref.get("containerName")
    if named:
        container = next((c for c in pod.spec.containers if c.name == named), container)
    kind, _, resource = str(ref.get("resource", "")).partition(".")
    resources = container.resources
    table = (resources.limits if kind == "limits" else resources.requests) if resources else None
    amount = (table or {}).get(resource)
    if amount is None:
        return None
    divisor = parse_quantity(ref.get("divisor") or "1")
    if divisor <= 0:
        return None
    return str(math.ceil(Decimal(amount) / divisor))
