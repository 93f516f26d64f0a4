"""Hints for the usual misplacements in a job document: a run-policy field put under `spec`,
a pod-spec field put beside `template.spec`, a block left empty by its indentation."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_core import ErrorDetails

from schemas.pod import PodSpec
from schemas.run_policy import RunPolicy

_RUN_POLICY = frozenset(RunPolicy.model_fields)
_POD_SPEC = frozenset(PodSpec.model_fields) - {"restartPolicy"}
"""A replica's own `restartPolicy` is Kubeflow's, and valid where it stands."""


def misplacement_hint(error: ErrorDetails) -> str | None:
    """What the user most likely meant, for an error of a usual misplacement; else None."""
    loc: Sequence[int | str] = error["loc"]
    if not loc:
        return None
    name, parent = loc[-1], (loc[-2] if len(loc) > 1 else None)
    kind = error["type"]
    if kind == "extra_forbidden" and isinstance(name, str):
        if name in _RUN_POLICY and len(loc) == 2 and parent == "spec":
            return f"{name} goes under spec.runPolicy (spec.runPolicy.{name})"
        if name in _POD_SPEC and parent != "spec":
            where = "beside template.spec" if parent == "template" else "on the replica"
            return f"{name} is a pod field: it goes under template.spec, not {where}"
    if error.get("input") is None and kind != "missing":
        if name == "spec" and parent == "template":
            return (
                "template.spec is empty: indent the pod spec (containers: ...) under it, "
                "deeper than spec:"
            )
        if isinstance(name, str):
            return f"{name} is empty: is what belongs in it indented under it?"
    if kind == "missing" and name == "spec" and parent == "template":
        return "the pod spec (containers: ...) goes under template.spec"
    return None
