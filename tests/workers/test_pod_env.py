"""Environment and command lines for local processes, resolved the way the kubelet does."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.pod import Container
from tests.workers.job_documents import job_document, rendered, replica
from workers.backends.pod_env import UnresolvableEnv, expand, process_spec
from workers.rendering import PodPlan


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)-$(B)", "1-$(B)"),  # an undefined reference stays as written
        ("$$(A)", "$(A)"),  # `$$` escapes the reference
        ("cost: $$5", "cost: $5"),
        ("a$b and $", "a$b and $"),  # any other `$` stays
        ("$(A", "$(A"),  # unterminated
        ("$()", "$()"),
        ("$(A)$(A)", "11"),
        ("", ""),
    ],
)
def test_expand_like_kubernetes(text: str, expected: str) -> None:
    assert expand(text, {"A": "1"}) == expected


def _pod(env: list[dict[str, Any]], **container: Any) -> tuple[PodPlan, Container]:
    document = job_document("JAXJob", "envy", {"Worker": replica(1)})
    spec = document["spec"]["jaxReplicaSpecs"]["Worker"]["template"]
    spec["metadata"]["labels"] = {"team": "vision"}
    spec["spec"]["containers"][0].update({"env": env, **container})
    pod = rendered(document).pods[0]
    return pod, pod.main_container


def test_variables_expand_against_those_defined_before_them() -> None:
    pod, container = _pod(
        [
            {"name": "HOST", "value": "node"},
            {"name": "ADDR", "value": "$(HOST):$(PORT)"},  # PORT comes later: stays
            {"name": "PORT", "value": "80"},
            {"name": "URL", "value": "http://$(HOST):$(PORT)/$$(HOST)"},
            {"name": "EMPTY"},
        ],
        command=["serve", "--at=$(URL)"],
        args=["$(ADDR)", "$$(PORT)"],
    )
    spec = process_spec(pod, container, "local")
    assert spec.env["ADDR"] == "node:$(PORT)"
    assert spec.env["URL"] == "http://node:80/$(HOST)"
    assert spec.env["EMPTY"] == ""
    assert spec.argv == ["serve", "--at=http://node:80/$(HOST)", "node:$(PORT)", "$(PORT)"]


def test_downward_api_fields_of_a_local_pod() -> None:
    def field(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    pod, container = _pod(
        [
            field("POD_IP", "status.podIP"),
            field("HOST_IP", "status.hostIP"),
            field("POD_NAME", "metadata.name"),
            field("POD_NAMESPACE", "metadata.namespace"),
            field("TEAM", "metadata.labels['team']"),
            field("NODE", "spec.nodeName"),
            {"name": "LISTEN", "value": "$(POD_IP):8080"},
        ]
    )
    spec = process_spec(pod, container, "local")
    assert {k: v for k, v in spec.env.items()} == {
        "POD_IP": "127.0.0.1",
        "HOST_IP": "127.0.0.1",
        "POD_NAME": "envy-worker-0",
        "POD_NAMESPACE": "default",
        "TEAM": "vision",
        "NODE": "local",
        "LISTEN": "127.0.0.1:8080",
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_PORT": spec.env["COORDINATOR_PORT"],
        "COORDINATOR_ADDRESS": "envy-worker-0",
        "NUM_PROCESSES": "1",
        "PROCESS_ID": "0",
    }


def test_resource_fields_round_up_in_the_divisors_unit() -> None:
    def resource(name: str, path: str, divisor: str | None = None) -> dict[str, Any]:
        ref = {"resource": path} | ({"divisor": divisor} if divisor else {})
        return {"name": name, "valueFrom": {"resourceFieldRef": ref}}

    pod, container = _pod(
        [
            resource("CPU_M", "requests.cpu", "1m"),
            resource("CPU", "requests.cpu"),
            resource("MEM_MI", "requests.memory", "1Mi"),
            resource("GPU", "limits.nvidia.com/gpu"),
        ]
    )
    spec = process_spec(pod, container, "local")
    assert (spec.env["CPU_M"], spec.env["CPU"], spec.env["MEM_MI"]) == ("100", "1", "64")
    assert "GPU" not in spec.env and len(spec.warnings) == 1


def test_secrets_cannot_be_read_locally_unless_optional() -> None:
    optional = {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}
    pod, container = _pod([{"name": "TOKEN", "valueFrom": optional}])
    spec = process_spec(pod, container, "local")
    assert "TOKEN" not in spec.env and "optional secretKeyRef" in spec.warnings[0]

    required = {"configMapKeyRef": {"name": "c", "key": "k"}}
    pod, container = _pod([{"name": "SETTING", "valueFrom": required}])
    with pytest.raises(UnresolvableEnv, match="env SETTING: configMapKeyRef"):
        process_spec(pod, container, "local")


def test_paddle_leader_learns_its_own_address() -> None:
    document = job_document("PaddleJob", "pp", {"Worker": replica(2)})
    leader = rendered(document).pods[0]
    spec = process_spec(leader, leader.main_container, "local")
    assert spec.env["POD_IP_DUMMY"] == "127.0.0.1"
    assert spec.env["PADDLE_MASTER"] == "127.0.0.1:36543"
