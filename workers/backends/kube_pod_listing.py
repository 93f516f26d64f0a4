"""A Kubernetes pod object as a `ListedPod`: its phase, node, start time, and the reason and
message a user would look for first (the pod's own, the scheduler's, a waiting or terminated
container's), read from the object a list call already returned."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from schemas.events import ListedPod, ListedPodPhase

_PHASES = frozenset(get_args(ListedPodPhase))


def listed_pod(pod: Mapping[str, Any]) -> ListedPod:
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase")
    reason, message = _why(status)
    return ListedPod(
        name=str(metadata.get("name")),
        namespace=metadata.get("namespace") or None,
        phase=phase if phase in _PHASES else "Unknown",
        node_name=(pod.get("spec") or {}).get("nodeName") or None,
        start_time=status.get("startTime") or None,
        reason=reason,
        message=message,
    )


def _why(status: Mapping[str, Any]) -> tuple[str | None, str | None]:
    if status.get("reason") or status.get("message"):
        return status.get("reason") or None, status.get("message") or None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("reason") or None, condition.get("message") or None
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        # A container kept waiting (ImagePullBackOff, CrashLoopBackOff) or one that failed.
        told = state.get("waiting") or state.get("terminated") or {}
        if told.get("reason") and told.get("reason") != "Completed":
            return told.get("reason"), told.get("message") or None
    return None, None
