"""A cluster's free capacity per node, read from its Node and Pod objects the way
kube-scheduler counts it: allocatable minus the requests of the pods bound to the node, and
the host ports those pods hold."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from schemas.cluster import NodeSnapshot, Taint
from schemas.host_ports import pod_host_ports
from schemas.pod import scheduled_requests
from schemas.quantity import QuantityError, parse_quantity
from workers.rendering import ANNOTATION_GANG_SIZE, LABEL_JOB_UID, LABEL_MANAGED, OPERATOR_NAME

log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _quantities(resources: Mapping[str, Any] | None) -> dict[str, Decimal]:
    parsed: dict[str, Decimal] = {}
    for name, value in (resources or {}).items():
        try:
            parsed[name] = parse_quantity(value)
        except QuantityError:
            log.warning("ignoring resource %s=%r: not a quantity", name, value)
    return parsed


def _container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    """Requests, with limits standing in for missing requests (as the apiserver defaults them)."""
    resources = container.get("resources") or {}
    merged = _quantities(resources.get("limits"))
    merged.update(_quantities(resources.get("requests")))
    return merged


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """What the scheduler reserves for a pod (`scheduled_requests`), plus its overhead."""
    total = scheduled_requests(
        (_container_requests(c) for c in spec.get("containers") or []),
        (
            (_container_requests(i), i.get("restartPolicy") == "Always")
            for i in spec.get("initContainers") or []
        ),
    )
    for name, amount in _quantities(spec.get("overhead")).items():
        total[name] = total.get(name, Decimal(0)) + amount
    return total


def node_is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_is_schedulable(node: Mapping[str, Any]) -> bool:
    return not (node.get("spec") or {}).get("unschedulable", False)


def _taints(node: Mapping[str, Any]) -> list[Taint]:
    return [
        Taint(key=t["key"], value=t.get("value") or None, effect=t["effect"])
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("key") and t.get("effect") in _TAINT_EFFECTS
    ]


def is_ours(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_MANAGED) == OPERATOR_NAME and LABEL_JOB_UID in labels


def job_uid_of(obj: Mapping[str, Any]) -> str | None:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    uid = labels.get(LABEL_JOB_UID)
    return str(uid) if uid else None


def gang_size(pod: Mapping[str, Any]) -> int:
    """How many pods the pod's job has (1 for pods made before jobs said so)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        return max(1, int(annotations.get(ANNOTATION_GANG_SIZE, 1)))
    except (TypeError, ValueError):
        return 1


def node_snapshots(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> tuple[list[NodeSnapshot], set[str]]:
    """Ready, schedulable nodes with what their non-terminal pods (everyone's) request, and
    the uids of our jobs whose whole gang that count includes.

    A job with only part of its pods bound is left out: the hub keeps holding its whole
    reservation until the rest is bound (counting the bound part twice for a moment), rather
    than letting go of the room its unbound pods still need."""
    requested: dict[str, dict[str, Decimal]] = {}
    pod_counts: dict[str, int] = {}
    held_ports: dict[str, set[str]] = {}
    bound: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        spec = pod.get("spec") or {}
        totals = requested.setdefault(node, {})
        for name, amount in pod_requests(spec).items():
            totals[name] = totals.get(name, Decimal(0)) + amount
        ports = pod_host_ports(spec)
        if ports:
            held_ports.setdefault(node, set()).update(ports)
        pod_counts[node] = pod_counts.get(node, 0) + 1
        if is_ours(pod):
            uid = job_uid_of(pod)
            if uid is not None:
                bound[uid] = bound.get(uid, 0) + 1
                sizes[uid] = gang_size(pod)
    jobs = {uid for uid, count in bound.items() if count >= sizes[uid]}
    snapshots = []
    for node in nodes:
        if not (node_is_ready(node) and node_is_schedulable(node)):
            continue
        metadata = node.get("metadata") or {}
        name = str(metadata.get("name"))
        allocatable = _quantities((node.get("status") or {}).get("allocatable"))
        used = dict(requested.get(name, {}))
        if "pods" in allocatable:
            used["pods"] = Decimal(pod_counts.get(name, 0))
        snapshots.append(
            NodeSnapshot(
                name=name,
                allocatable=allocatable,
                requested=used,
                labels=dict(metadata.get("labels") or {}),
                taints=_taints(node),
                hostPorts=sorted(held_ports.get(name, ())),
            )
        )
    return snapshots, jobs
