"""Small builders shared by tests: job documents and cluster snapshots."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bus.base import Bus
from bus.events import publish_event
from bus.topics import Topics
from schemas.cluster import ClusterSnapshot, NodeSnapshot
from schemas.events import EventType, make_event
from schemas.quantity import parse_quantity


def jax_job(
    name: str,
    *,
    workers: int = 2,
    cpu: str = "1",
    memory: str = "1Gi",
    duration: str = "0.2s",
    exit_code: str | None = None,
    managed: bool = True,
    extra_resources: dict[str, str] | None = None,
    restart_policy: str = "Never",
    node_selector: dict[str, str] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    annotations = {"trainhub.io/sim-duration": duration}
    if exit_code is not None:
        annotations["trainhub.io/sim-exit-code"] = exit_code
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "jax",
                "image": "example/jax:1",
                "command": ["python", "-c", "pass"],
                "resources": {
                    "requests": {"cpu": cpu, "memory": memory, **(extra_resources or {})},
                    # Extended resources (GPUs) cannot be overcommitted: limit = request.
                    **({"limits": dict(extra_resources)} if extra_resources else {}),
                },
            }
        ]
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    run_policy: dict[str, Any] = {"managedBy": "trainhub.io/dispatcher"} if managed else {}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "JAXJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runPolicy": run_policy,
            "jaxReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": restart_policy,
                    "template": {"metadata": {"annotations": annotations}, "spec": spec},
                }
            },
        },
    }


def _worker_pod(document: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = document["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]
    return spec


def on_host_network(document: dict[str, Any]) -> dict[str, Any]:
    """`jax_job`'s document with its pods on the host network (holding the JAX port, 6666)."""
    _worker_pod(document)["hostNetwork"] = True
    return document


def with_host_port(document: dict[str, Any], port: int) -> dict[str, Any]:
    """`jax_job`'s document with its pods holding host port `port`."""
    _worker_pod(document)["containers"][0]["ports"] = [{"containerPort": port, "hostPort": port}]
    return document


def node(name: str, requested: dict[str, str] | None = None, **allocatable: str) -> NodeSnapshot:
    return NodeSnapshot(
        name=name,
        allocatable={k.replace("_", "/"): parse_quantity(v) for k, v in allocatable.items()},
        requested={k: parse_quantity(v) for k, v in (requested or {}).items()},
    )


def cluster(name: str, *nodes: NodeSnapshot, **fields: Any) -> ClusterSnapshot:
    return ClusterSnapshot(name=name, nodes=list(nodes), **fields)


async def publish_heartbeat(bus: Bus, topics: Topics, snapshot: ClusterSnapshot) -> None:
    """Publish `snapshot` as its cluster's heartbeat, as a worker would: on its cluster's
    reports topic (created if need be)."""
    await bus.create_topics([topics.reports_spec(snapshot.name)])
    event = make_event(EventType.CLUSTER_HEARTBEAT, "test", snapshot.name, snapshot)
    await publish_event(bus, topics.reports(snapshot.name), snapshot.name, event)


async def publish_passed_on(bus: Bus, topics: Topics, snapshot: ClusterSnapshot) -> None:
    """Publish `snapshot` on the clusters topic, as the hub passes a worker's heartbeat on to
    readers (for tests of readers without a hub)."""
    event = make_event(EventType.CLUSTER_HEARTBEAT, "test", snapshot.name, snapshot)
    await publish_event(bus, topics.clusters, snapshot.name, event)


async def publish_report(bus: Bus, topics: Topics, cluster: str, key: str, event: Any) -> None:
    """Publish `event` on `cluster`'s reports topic, as its worker would (created if need be):
    a status, a hand-back or a heartbeat."""
    await bus.create_topics([topics.reports_spec(cluster)])
    await publish_event(bus, topics.reports(cluster), key, event)


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until `check()` holds (for in-process state that offers no event to wait on)."""
    async with asyncio.timeout(timeout):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
