"""The usual misplacements in a job document get a hint at what was meant (issue 29)."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.errors import JobInvalid
from schemas.job_parsing import parse_job
from tests.helpers import jax_job


def _refusal(document: dict[str, Any]) -> str:
    with pytest.raises(JobInvalid) as refused:
        parse_job(document)
    return str(refused.value)


def _template(document: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = document["spec"]["jaxReplicaSpecs"]["Worker"]["template"]
    return template


def test_a_run_policy_field_under_spec_is_pointed_to_run_policy() -> None:
    document = jax_job("misplaced")
    document["spec"]["schedulingPolicy"] = {"queue": "research"}
    assert _refusal(document).endswith(
        "spec.schedulingPolicy: Extra inputs are not permitted (got {'queue': 'research'}): "
        "schedulingPolicy goes under spec.runPolicy (spec.runPolicy.schedulingPolicy)"
    )


def test_a_misindented_pod_spec_says_so() -> None:
    document = jax_job("misindented")
    template = _template(document)
    template["containers"] = template["spec"]["containers"]
    template["spec"] = None  # `spec:` with `containers:` at its own level
    said = _refusal(document)
    assert "template.spec: Input should be a valid dictionary" in said
    assert "template.spec is empty: indent the pod spec (containers: ...) under it" in said


def test_a_pod_field_on_the_replica_is_pointed_to_template_spec() -> None:
    document = jax_job("selector")
    document["spec"]["jaxReplicaSpecs"]["Worker"]["nodeSelector"] = {"zone": "a"}
    assert "nodeSelector is a pod field: it goes under template.spec" in _refusal(document)


def test_other_errors_get_no_hint() -> None:
    document = jax_job("plain")
    document["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] = "two"
    said = _refusal(document)
    assert said.endswith("(got 'two')"), said
