"""How the kube tests reach a sandbox cluster: as its worker (a KubeBackend with the
least-privilege identity) and as its admin (plain API calls, to check what really exists)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from typing import Any

from trainhub_sandbox.kube_api import ApiClient
from trainhub_sandbox.kube_cluster import MemberCluster
from workers.backends.base import PodObservation
from workers.backends.kube import KubeBackend
from workers.rendering import LABEL_JOB_UID


def worker_backend(cluster: MemberCluster, *, watch_timeout_seconds: int = 300) -> KubeBackend:
    return KubeBackend(
        cluster.worker_kubeconfig,
        cluster=cluster.name,
        context=cluster.worker_context,
        namespaces=cluster.worker_namespaces,
        watch_timeout_seconds=watch_timeout_seconds,
    )


async def admin_request(
    cluster: MemberCluster, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    admin = ApiClient.for_cluster(cluster)
    return await asyncio.to_thread(admin.request, method, path, body)


async def job_objects(
    cluster: MemberCluster, resource: str, job_uid: str, namespace: str = "default"
) -> list[dict[str, Any]]:
    """The job's pods or services, as the admin sees them."""
    path = f"/api/v1/namespaces/{namespace}/{resource}?labelSelector={LABEL_JOB_UID}%3D{job_uid}"
    status, reply = await admin_request(cluster, "GET", path)
    assert status == 200, reply
    return list(reply.get("items") or [])


async def collect(
    backend: KubeBackend,
    done: Callable[[list[PodObservation]], bool],
    timeout: float = 30.0,
) -> list[PodObservation]:
    """Observations until `done` says enough (a TimeoutError shows what did arrive)."""
    seen: list[PodObservation] = []
    try:
        async with asyncio.timeout(timeout):
            while not done(seen):
                seen.append(await backend.observations.get())
    except TimeoutError:
        raise AssertionError(f"gave up after {timeout}s; observations: {seen}") from None
    return seen


async def eventually(check: Callable[[], bool], timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if check():
                return
            await asyncio.sleep(0.05)


def phases_by_pod(observations: list[PodObservation]) -> dict[str, list[str]]:
    phases: dict[str, list[str]] = {}
    for obs in observations:
        phases.setdefault(obs.name, []).append(obs.phase)
    return phases


def finished(count: int) -> Callable[[list[PodObservation]], bool]:
    """Enough once `count` pods reached Succeeded or Failed."""
    return lambda seen: sum(o.phase in ("Succeeded", "Failed") for o in seen) >= count


def compact_etcd(etcd_url: str) -> int:
    """Compact the shared etcd up to its current revision (through its JSON gateway), so that
    every older resourceVersion is gone; returns that revision."""

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            etcd_url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            reply: dict[str, Any] = json.loads(response.read())
            return reply

    revision = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision
