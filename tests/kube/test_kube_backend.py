"""The `kube` backend against real apiservers: kube-scheduler binds the pods, kwok runs them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from schemas.job_parsing import parse_job
from schemas.sim_annotations import SIM_DURATION
from tests.helpers import jax_job
from tests.kube.sandbox_access import (
    admin_request,
    collect,
    compact_etcd,
    eventually,
    finished,
    job_objects,
    phases_by_pod,
    worker_backend,
)
from trainhub_sandbox.kube_cluster import KubeSandbox, MemberCluster
from workers.backends.base import Capacity, PodLogsUnavailable
from workers.backends.kube import KubeBackend
from workers.backends.kube_client import KubeConflict, KubeForbidden
from workers.metrics import KUBE_API
from workers.rendering import (
    LABEL_JOB_NAME,
    LABEL_JOB_UID,
    LABEL_MANAGED,
    LABEL_REPLICA_TYPE,
    RenderedJob,
    render_job,
)

pytestmark = pytest.mark.kube


def _rendered(doc: dict[str, Any]) -> RenderedJob:
    return render_job(parse_job(doc))


def _long_running(doc: dict[str, Any]) -> dict[str, Any]:
    """Without the sim annotation kwok keeps the pods Running until they are deleted."""
    template = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]
    template["metadata"]["annotations"].pop(SIM_DURATION)
    return doc


async def _create(backend: KubeBackend, rendered: RenderedJob) -> None:
    uid = rendered.job.uid
    for service in rendered.services:
        await backend.create_service(uid, service)
    for pod in rendered.pods:
        await backend.create_pod(uid, pod)


def _node(capacity: Capacity, name: str) -> dict[str, Decimal]:
    node = next(n for n in capacity.nodes if n.name == name)
    return {r: node.requested.get(r, Decimal(0)) for r in ("cpu", "memory", "pods")}


async def test_a_job_runs_on_bound_pods_and_succeeds(
    east: MemberCluster, east_backend: KubeBackend
) -> None:
    rendered = _rendered(jax_job("kube-ok", workers=2, cpu="500m", duration="2s"))
    uid = rendered.job.uid
    try:
        await _create(east_backend, rendered)
        pods = await job_objects(east, "pods", uid)
        services = await job_objects(east, "services", uid)
        assert sorted(p["metadata"]["name"] for p in pods) == [
            "kube-ok-worker-0",
            "kube-ok-worker-1",
        ]
        assert sorted(s["metadata"]["name"] for s in services) == [
            "kube-ok-worker-0",
            "kube-ok-worker-1",
        ]
        for obj in pods + services:
            labels = obj["metadata"]["labels"]
            assert labels[LABEL_JOB_UID] == uid
            assert labels[LABEL_MANAGED] == "trainhub"
            assert labels[LABEL_JOB_NAME] == "kube-ok"
            assert labels[LABEL_REPLICA_TYPE] == "worker"
        assert all(s["spec"]["clusterIP"] == "None" for s in services)

        seen = await collect(east_backend, finished(2))
        assert phases_by_pod(seen) == {
            "kube-ok-worker-0": ["Pending", "Running", "Succeeded"],
            "kube-ok-worker-1": ["Pending", "Running", "Succeeded"],
        }
        done = [o for o in seen if o.phase == "Succeeded"]
        assert {o.exit_code for o in done} == {0}
        assert {o.job_uid for o in seen} == {uid}
        # kube-scheduler bound them to the cluster's kwok nodes.
        assert {o.node for o in done} <= set(east.node_names)
        bound = {
            p["metadata"]["name"]: p["spec"].get("nodeName")
            for p in await job_objects(east, "pods", uid)
        }
        assert bound == {o.name: o.node for o in done}
    finally:
        await east_backend.delete_job(uid)


async def test_a_failing_pod_reports_its_exit_code(
    east: MemberCluster, east_backend: KubeBackend
) -> None:
    rendered = _rendered(jax_job("kube-fails", workers=1, duration="1s", exit_code="3"))
    try:
        await _create(east_backend, rendered)
        seen = await collect(east_backend, finished(1))
        assert [o.phase for o in seen] == ["Pending", "Running", "Failed"]
        assert seen[-1].exit_code == 3
        assert seen[-1].node in east.node_names
    finally:
        await east_backend.delete_job(rendered.job.uid)


async def test_create_is_idempotent_and_delete_job_removes_everything(
    east: MemberCluster, east_backend: KubeBackend
) -> None:
    rendered = _rendered(_long_running(jax_job("kube-twice", workers=2, cpu="100m")))
    uid = rendered.job.uid
    await _create(east_backend, rendered)
    await _create(east_backend, rendered)  # 409 AlreadyExists is success
    assert len(await job_objects(east, "pods", uid)) == 2
    assert len(await job_objects(east, "services", uid)) == 2
    assert uid in await east_backend.job_uids()
    await collect(east_backend, lambda seen: sum(o.phase == "Running" for o in seen) == 2)

    await east_backend.delete_job(uid)
    assert await job_objects(east, "pods", uid) == []
    assert await job_objects(east, "services", uid) == []
    assert uid not in await east_backend.job_uids()
    await east_backend.delete_job(uid)  # nothing left: still fine
    await east_backend.delete_pod(uid, "kube-twice-worker-0", "default")


async def test_capacity_counts_requests_per_node_and_everyones_pods(
    east: MemberCluster, east_backend: KubeBackend
) -> None:
    before = await east_backend.capacity()
    assert sorted(n.name for n in before.nodes) == sorted(east.node_names)
    assert all(n.allocatable["cpu"] == Decimal(4) for n in before.nodes)
    rendered = _rendered(_long_running(jax_job("kube-cap", workers=1, cpu="1500m", memory="1Gi")))
    uid = rendered.job.uid
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "someone-elses", "namespace": "kube-system"},
        "spec": {
            "nodeName": east.node_names[0],
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "250m"}}}],
        },
    }
    try:
        await _create(east_backend, rendered)
        running = await collect(east_backend, lambda seen: any(o.phase == "Running" for o in seen))
        node = running[-1].node
        assert node is not None
        after = await east_backend.capacity()
        grown = _node(after, node)
        assert grown["cpu"] - _node(before, node)["cpu"] == Decimal("1.5")
        assert grown["memory"] - _node(before, node)["memory"] == Decimal(2**30)
        assert grown["pods"] - _node(before, node)["pods"] == 1
        assert uid in after.jobs
        other = next(n for n in east.node_names if n != node)
        assert _node(after, other) == _node(before, other)

        # Pods that are not ours take room too (the worker reads pods cluster-wide).
        status, reply = await admin_request(
            east, "POST", "/api/v1/namespaces/kube-system/pods", foreign
        )
        assert status == 201, reply
        with_foreign = await east_backend.capacity()
        host = east.node_names[0]
        assert _node(with_foreign, host)["cpu"] - _node(after, host)["cpu"] == Decimal("0.25")
        assert with_foreign.jobs == after.jobs
    finally:
        await admin_request(
            east, "DELETE", "/api/v1/namespaces/kube-system/pods/someone-elses?gracePeriodSeconds=0"
        )
        await east_backend.delete_job(uid)
    assert _node(await east_backend.capacity(), node) == _node(before, node)


def _node_requests(cluster: str) -> dict[str, float]:
    """The backend's node requests so far, by verb (every status code together)."""
    counts: dict[str, float] = {}
    for metric in KUBE_API.requests.collect():
        for sample in metric.samples:
            labels = sample.labels
            if sample.name.endswith("_total") and labels["cluster"] == cluster:
                if labels["resource"] == "nodes":
                    counts[labels["verb"]] = counts.get(labels["verb"], 0) + sample.value
    return counts


async def test_capacity_follows_the_nodes_by_watch_without_listing_them_per_read(
    east: MemberCluster, east_backend: KubeBackend
) -> None:
    node = east.node_names[-1]
    path = f"/api/v1/nodes/{node}"
    lists = _node_requests(east_backend.cluster).get("list", 0)
    assert lists >= 1  # the backend's start
    for _ in range(3):
        assert node in {n.name for n in (await east_backend.capacity()).nodes}
    assert _node_requests(east_backend.cluster).get("list", 0) == lists, "a read listed nodes"
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    try:
        status, reply = await admin_request(east, "PATCH", path, {"spec": {"unschedulable": True}})
        assert status == 200, reply
        await _until_nodes(east_backend, lambda names: node not in names)
        uncordoned = {"spec": {"unschedulable": None, "taints": [taint]}}
        status, reply = await admin_request(east, "PATCH", path, uncordoned)
        assert status == 200, reply
        back = await _until_nodes(east_backend, lambda names: node in names)
        assert [t.key for t in next(n for n in back.nodes if n.name == node).taints] == [
            "dedicated"
        ]
    finally:
        restored = {"spec": {"unschedulable": None, "taints": None}}
        status, reply = await admin_request(east, "PATCH", path, restored)
        assert status == 200, reply
    cleared = await _until_nodes(
        east_backend,
        lambda names: node in names,
        lambda capacity: not next(n for n in capacity.nodes if n.name == node).taints,
    )
    assert sorted(n.name for n in cleared.nodes) == sorted(east.node_names)


async def _until_nodes(
    backend: KubeBackend,
    names_ok: Callable[[set[str]], bool],
    capacity_ok: Callable[[Capacity], bool] = lambda _: True,
    timeout: float = 10.0,
) -> Capacity:
    """The backend's capacity once its nodes are as asked (the watch brings changes in)."""
    async with asyncio.timeout(timeout):
        while True:
            capacity = await backend.capacity()
            if names_ok({n.name for n in capacity.nodes}) and capacity_ok(capacity):
                return capacity
            await asyncio.sleep(0.05)


async def test_a_pod_no_node_can_hold_is_pending_unschedulable(
    east_backend: KubeBackend,
) -> None:
    rendered = _rendered(jax_job("kube-huge", workers=1, cpu="64"))
    try:
        await _create(east_backend, rendered)
        seen = await collect(east_backend, lambda seen: any(o.message for o in seen))
        assert [o.phase for o in seen] == ["Pending", "Pending"]
        assert seen[-1].message is not None
        assert seen[-1].message.startswith("Unschedulable: 0/2 nodes are available")
        assert "Insufficient cpu" in seen[-1].message
        assert seen[-1].node is None
        assert rendered.job.uid not in (await east_backend.capacity()).jobs
    finally:
        await east_backend.delete_job(rendered.job.uid)


async def test_forbidden_namespace_is_a_clear_permanent_error(
    east: MemberCluster, east_backend: KubeBackend
) -> None:
    doc = jax_job("kube-sneaky", workers=1, namespace="kube-system")
    rendered = _rendered(doc)
    with pytest.raises(KubeForbidden) as raised:
        await east_backend.create_pod(rendered.job.uid, rendered.pods[0])
    message = str(raised.value)
    assert message.startswith("trainhub-worker may not create pods in namespace kube-system: ")
    assert raised.value.status == 403
    assert east_backend.api.retries == 0  # permanent: not retried
    status, _ = await admin_request(
        east, "GET", "/api/v1/namespaces/kube-system/pods/kube-sneaky-worker-0"
    )
    assert status == 404


async def test_pod_logs_explain_why_there_are_none(
    east_backend: KubeBackend,
) -> None:
    rendered = _rendered(_long_running(jax_job("kube-logs", workers=1, cpu="100m")))
    try:
        await _create(east_backend, rendered)
        await collect(east_backend, lambda seen: any(o.phase == "Running" for o in seen))
        # KWOK's nodes serve no logs: a clear error naming the pod and cluster, not text.
        with pytest.raises(
            PodLogsUnavailable, match="no logs for default/kube-logs-worker-0 on east"
        ):
            await east_backend.pod_logs(rendered.job.uid, "kube-logs-worker-0")
    finally:
        await east_backend.delete_job(rendered.job.uid)


async def test_a_restarted_backend_adopts_pods_without_repeating_observations(
    east: MemberCluster,
) -> None:
    rendered = _rendered(_long_running(jax_job("kube-adopt", workers=2, cpu="100m")))
    uid = rendered.job.uid
    first = worker_backend(east)
    await first.start()
    try:
        await _create(first, rendered)
        await collect(first, lambda seen: sum(o.phase == "Running" for o in seen) == 2)
    finally:
        await first.close()
    second = worker_backend(east)
    await second.start()
    try:
        # The initial list reports the pods as they are now, once each.
        assert uid in await second.job_uids()
        listed = [second.observations.get_nowait() for _ in range(second.observations.qsize())]
        assert sorted((o.name, o.phase) for o in listed if o.job_uid == uid) == [
            ("kube-adopt-worker-0", "Running"),
            ("kube-adopt-worker-1", "Running"),
        ]
        await _create(second, rendered)  # re-creating adopted pods changes nothing
        await asyncio.sleep(0.5)
        assert second.observations.empty()
    finally:
        await second.delete_job(uid)
        await second.close()


async def test_watch_relists_after_410_gone_and_misses_nothing(
    kube_sandbox: KubeSandbox, west: MemberCluster
) -> None:
    # west serves watches from etcd: after a compaction, resuming from an older
    # resourceVersion is answered 410 Gone, and the backend must list again.
    backend = worker_backend(west, watch_timeout_seconds=1)
    await backend.start()
    first = _rendered(_long_running(jax_job("kube-gone-1", workers=1, cpu="100m")))
    second = _rendered(_long_running(jax_job("kube-gone-2", workers=1, cpu="100m")))
    try:
        await _create(backend, first)
        await collect(backend, lambda seen: any(o.phase == "Running" for o in seen))
        (watch,) = backend.watches
        # Move etcd on by writes the pod watch does not see (a watch from revision R needs
        # R+1 onwards, so two), then forget the history.
        bump = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-gone-bump"}}
        configmaps = "/api/v1/namespaces/default/configmaps"
        status, reply = await admin_request(west, "POST", configmaps, bump)
        assert status == 201, reply
        status, reply = await admin_request(west, "DELETE", f"{configmaps}/kube-gone-bump")
        assert status == 200, reply
        compact_etcd(kube_sandbox.etcd_url)
        await eventually(lambda: watch.relists > 0, timeout=15)
        await _create(backend, second)
        seen = await collect(backend, lambda seen: any(o.phase == "Running" for o in seen))
        # The relist did not report kube-gone-1 again; kube-gone-2 came through the new watch.
        assert {o.name for o in seen} == {"kube-gone-2-worker-0"}
        assert phases_by_pod(seen)["kube-gone-2-worker-0"] == ["Pending", "Running"]
    finally:
        await backend.delete_job(first.job.uid)
        await backend.delete_job(second.job.uid)
        await backend.close()


async def test_a_worker_without_namespaces_deletes_a_known_jobs_objects_where_they_are(
    east: MemberCluster, east_backend: KubeBackend
) -> None:
    # Run without --namespace, a worker whose identity is bound to some namespaces may not
    # list every namespace; told the job's namespace, its revocation still finds the objects.
    rendered = _rendered(_long_running(jax_job("kube-scoped", workers=1, cpu="100m")))
    uid = rendered.job.uid
    await _create(east_backend, rendered)
    everywhere = KubeBackend(
        east.worker_kubeconfig, cluster=east.name, context=east.worker_context, namespaces=None
    )
    await everywhere.start()
    try:
        with pytest.raises(KubeForbidden, match="may not list"):
            await everywhere.delete_job(uid)
        await everywhere.delete_job(uid, "default")
        assert await job_objects(east, "pods", uid) == []
        assert await job_objects(east, "services", uid) == []
    finally:
        await everywhere.close()


async def test_a_foreign_pod_with_a_replicas_name_is_not_adopted(
    east: MemberCluster, east_backend: KubeBackend
) -> None:
    rendered = _rendered(_long_running(jax_job("kube-clash", workers=1, cpu="100m")))
    pod = rendered.pods[0]
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": "default", "labels": {"app": "someone"}},
        "spec": {"containers": [{"name": "c", "image": "example/other:1"}]},
    }
    status, reply = await admin_request(east, "POST", "/api/v1/namespaces/default/pods", foreign)
    assert status == 201, reply
    try:
        with pytest.raises(KubeConflict, match="exists and is not this job's"):
            await east_backend.create_pod(rendered.job.uid, pod)
        # Its own objects again are still an idempotent create.
        ours = _rendered(_long_running(jax_job("kube-ours", workers=1, cpu="100m")))
        await east_backend.create_pod(ours.job.uid, ours.pods[0])
        await east_backend.create_pod(ours.job.uid, ours.pods[0])
        await east_backend.delete_job(ours.job.uid)
    finally:
        await admin_request(east, "DELETE", f"/api/v1/namespaces/default/pods/{pod.name}")
