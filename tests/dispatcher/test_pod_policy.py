"""Pod security policy: host privileges are refused unless the cluster allows them."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.placement import plan_placement
from dispatcher.pod_policy import policy_refusal, requested_privileges
from schemas.cluster import ClusterPolicy
from schemas.job_parsing import parse_job
from schemas.status import JobPhase
from tests.helpers import cluster, jax_job, node
from trainhub.embedded import Embedded, EmbeddedOptions
from workers.cluster_spec import parse_cluster_spec


def asking(**pod: Any) -> dict[str, Any]:
    doc = jax_job("host", workers=1)
    spec = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]
    container = pod.pop("container", None)
    if container:
        spec["containers"][0].update(container)
    spec.update(pod)
    return doc


@pytest.mark.parametrize(
    ("pod", "privilege", "where"),
    [
        ({"hostNetwork": True}, "hostNetwork", "Worker: hostNetwork"),
        ({"hostPID": "yes"}, "hostPID", "Worker: hostPID"),
        (
            {"volumes": [{"name": "data", "hostPath": {"path": "/data"}}]},
            "hostPath",
            "Worker: volumes[data].hostPath",
        ),
        (
            {"container": {"securityContext": {"privileged": True}}},
            "privileged",
            "Worker: containers[jax].securityContext.privileged",
        ),
        (
            {"initContainers": [{"name": "init", "image": "x", "securityContext": True}]},
            "privileged",
            "Worker: initContainers[init].securityContext",
        ),
        (
            {"ephemeralContainers": [{"securityContext": {"privileged": 1}}]},
            "privileged",
            "Worker: ephemeralContainers[0].securityContext.privileged",
        ),
    ],
)
def test_every_way_of_asking_is_found(pod: dict[str, Any], privilege: str, where: str) -> None:
    requests = requested_privileges(parse_job(asking(**pod)))
    assert [(r.privilege, r.where) for r in requests] == [(privilege, where)]


def test_asking_for_nothing_is_nothing() -> None:
    doc = asking(
        hostNetwork=False,
        volumes=[{"name": "scratch", "emptyDir": {}}],
        container={"securityContext": {"privileged": False, "runAsUser": 1000}},
    )
    assert requested_privileges(parse_job(doc)) == ()


def test_a_replica_type_of_no_replicas_asks_for_nothing() -> None:
    doc = asking(hostNetwork=True, container={"securityContext": {"privileged": True}})
    doc["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] = 0
    assert requested_privileges(parse_job(doc)) == ()


def test_refusal_names_what_and_where_and_the_policy_switch() -> None:
    requests = requested_privileges(
        parse_job(asking(hostNetwork=True, container={"securityContext": {"privileged": True}}))
    )
    refusal = policy_refusal(requests, ClusterPolicy(allowHostNetwork=True))
    assert refusal == (
        "pod security policy: privileged containers are not allowed here (Worker: "
        "containers[jax].securityContext.privileged; policy.allowPrivileged is false)"
    )
    assert (
        policy_refusal(requests, ClusterPolicy(allowHostNetwork=True, allowPrivileged=True)) is None
    )


def test_policy_refusal_is_never_fits_and_an_allowing_cluster_takes_the_job() -> None:
    job = parse_job(asking(hostPID=True))
    strict = cluster("strict", node("a", cpu="8", memory="8Gi"))
    placement = plan_placement(job, [strict])
    assert placement.chosen is None and placement.never_fits
    assert "hostPID is not allowed here" in (placement.decision.clusters[0].reason or "")
    lenient = cluster("lenient", node("a", cpu="8", memory="8Gi"), policy={"allowHostPID": True})
    assert plan_placement(job, [strict, lenient]).chosen == "lenient"


def test_namespace_allow_list_is_never_fits() -> None:
    job = parse_job(jax_job("ns", workers=1, namespace="team-a"))
    only_b = cluster("only-b", node("a", cpu="8", memory="8Gi"), namespaces=["team-b"])
    placement = plan_placement(job, [only_b])
    assert placement.never_fits
    assert "namespace 'team-a' is not allowed on this cluster" in (
        placement.decision.clusters[0].reason or ""
    )


async def test_the_hub_rejects_a_privileged_job_with_the_policy_reason() -> None:
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("east:cpu=4,memory=8Gi")],
        backend="sim",
        heartbeat_interval=0.2,
    )
    async with Embedded(options) as system:
        uid = await system.submit(asking(hostNetwork=True))
        ok = await system.submit(jax_job("plain", workers=1))
        final = await system.wait_finished([uid, ok], timeout=20)
    assert final[uid].phase == JobPhase.REJECTED
    assert "east: pod security policy: hostNetwork is not allowed here" in (
        final[uid].message or ""
    )
    assert final[ok].phase == JobPhase.SUCCEEDED
