"""Where a job document keeps the switches producers and the hub set on it, `managedBy` and
`suspend`: in `spec.runPolicy` for the Kubeflow v1 kinds, in `spec` itself for a TrainJob
(Kubeflow Trainer v2), so that no caller writes a field that the other kind refuses."""

from __future__ import annotations

from typing import Any

TRAINJOB_KIND = "TrainJob"


def controls_path(kind: object) -> str:
    """The path of the mapping that holds `managedBy` and `suspend` in a `kind` document."""
    return "spec" if kind == TRAINJOB_KIND else "spec.runPolicy"


def control_field(kind: object, name: str) -> str:
    """How messages name the `name` switch of a `kind` job: `runPolicy.suspend` (as the v1
    kinds' users know it) or a TrainJob's `spec.suspend`."""
    return f"spec.{name}" if kind == TRAINJOB_KIND else f"runPolicy.{name}"


def job_controls(document: dict[str, Any], *, create: bool = True) -> dict[str, Any] | None:
    """The mapping of `document` that holds `managedBy` and `suspend` (the v1 kinds'
    `spec.runPolicy` added when missing and `create`); None where the document has no such
    mapping to write (its validation says why)."""
    spec = document.get("spec")
    if not isinstance(spec, dict):
        return None
    if document.get("kind") == TRAINJOB_KIND:
        return spec
    policy = spec.get("runPolicy")
    if policy is None and create:
        policy = spec["runPolicy"] = {}
    return policy if isinstance(policy, dict) else None


def with_suspend(document: dict[str, Any], suspend: bool) -> dict[str, Any]:
    """`document` with its kind's `suspend` set (modified in place, and returned)."""
    controls = job_controls(document)
    if controls is None:
        raise ValueError(f"{controls_path(document.get('kind'))}: expected a mapping")
    controls["suspend"] = suspend
    return document
