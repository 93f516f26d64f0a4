"""The whole system on real parts: jobs submitted on a real Kafka broker, placed by the hub on
one of three sandbox clusters of different capacity (one with H100 GPU nodes), created there by
that cluster's worker with its least-privilege identity, bound by kube-scheduler to KWOK nodes,
run by KWOK, and reported back on the status topic."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from schemas.status import JobPhase
from tests.helpers import jax_job
from tests.kafka.processes import Process
from tests.kube.conftest import A100, GPU_PRODUCT_LABEL, H100
from tests.kube.helpers_e2e import Fleet, node_labels, pods_of, running_fleet
from tests.kube.sandbox_access import job_objects
from trainhub.producer import submit_document
from trainhub_sandbox.kube_cluster import KubeSandbox

pytestmark = [pytest.mark.kube, pytest.mark.kafka]


def gpu_job(name: str, product: str, *, workers: int = 2, gpus: str = "2") -> dict[str, Any]:
    """A JAXJob whose pods need `gpus` GPUs of one model (extended resources: limits too)."""
    document = jax_job(
        name,
        workers=workers,
        cpu="2",
        memory="8Gi",
        duration="2s",
        extra_resources={"nvidia.com/gpu": gpus},
        node_selector={GPU_PRODUCT_LABEL: product},
    )
    template = document["spec"]["jaxReplicaSpecs"]["Worker"]["template"]
    template["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": gpus}
    return document


async def submit(fleet: Fleet, document: dict[str, Any]) -> str:
    return await submit_document(fleet.bus, fleet.topics, document)


async def assert_ran_only_where_placed(fleet: Fleet, uid: str, pods: int) -> list[dict[str, Any]]:
    """The job succeeded on the cluster the hub assigned: exactly its pods there, bound by
    the scheduler to that cluster's nodes and finished by KWOK; none anywhere else."""
    history = fleet.status.history(uid)
    final = history[-1]
    assert final.phase == JobPhase.SUCCEEDED, fleet.status
    assigned = next(u for u in history if u.phase == JobPhase.ASSIGNED)
    assert assigned.placement is not None and assigned.placement.chosen == final.cluster
    phases = [u.phase for u in history]
    assert phases.index(JobPhase.CREATED) < phases.index(JobPhase.RUNNING)
    assert phases.index(JobPhase.RUNNING) < phases.index(JobPhase.SUCCEEDED)
    cluster = fleet.cluster(final.cluster)
    found = await pods_of(cluster, uid)
    assert len(found) == pods, [p["metadata"]["name"] for p in found]
    for pod in found:
        assert pod["spec"]["nodeName"] in cluster.node_names
        assert pod["status"]["phase"] == "Succeeded"
    for other in fleet.sandbox.clusters.values():
        if other.name != cluster.name:
            assert await pods_of(other, uid) == [], f"{uid} has pods on {other.name}"
    record = fleet.hub.ledger.get(uid)
    assert record is not None and record.phase == JobPhase.SUCCEEDED
    return found


async def test_jobs_land_on_the_cluster_the_hub_chose_and_gpu_jobs_only_on_their_model(
    fleet_sandbox: KubeSandbox, kafka_settings: KafkaSettings, topics: Topics
) -> None:
    async with running_fleet(kafka_settings, topics, fleet_sandbox) as fleet:
        jobs = {
            "cpu": jax_job("mc-cpu", workers=2, cpu="1", memory="1Gi", duration="2s"),
            # 12 cpu per pod: only large's 16-cpu nodes can hold one.
            "big": jax_job("mc-big", workers=2, cpu="12", memory="16Gi", duration="1s"),
            # large has more free GPUs (8 A100s on one node) but not of this model.
            "h100": gpu_job("mc-h100", H100),
            "a100": gpu_job("mc-a100", A100, workers=1, gpus="4"),
            "b200": gpu_job("mc-b200", "NVIDIA-B200"),
        }
        uids = {key: await submit(fleet, doc) for key, doc in jobs.items()}
        try:
            await fleet.status.wait_finished(uids.values(), timeout=90)

            rejected = fleet.status.last(uids["b200"])
            assert rejected.phase == JobPhase.REJECTED, fleet.status
            assert rejected.cluster is None
            assert rejected.message is not None
            assert f"nodeSelector {GPU_PRODUCT_LABEL}=NVIDIA-B200" in rejected.message
            for name in fleet.sandbox.clusters:
                assert f"{name}: " in rejected.message
            for cluster in fleet.sandbox.clusters.values():
                assert await pods_of(cluster, uids["b200"]) == []

            await assert_ran_only_where_placed(fleet, uids["cpu"], pods=2)
            await assert_ran_only_where_placed(fleet, uids["big"], pods=2)
            assert fleet.status.last(uids["big"]).cluster == "large"

            for key, model, cluster_name, count, gpus in (
                ("h100", H100, "h100", 2, "2"),
                ("a100", A100, "large", 1, "4"),
            ):
                pods = await assert_ran_only_where_placed(fleet, uids[key], pods=count)
                assert fleet.status.last(uids[key]).cluster == cluster_name
                cluster = fleet.cluster(cluster_name)
                for pod in pods:
                    labels = await node_labels(cluster, pod["spec"]["nodeName"])
                    assert labels[GPU_PRODUCT_LABEL] == model
                    resources = pod["spec"]["containers"][0]["resources"]
                    assert resources["requests"]["nvidia.com/gpu"] == gpus
        finally:
            await fleet.cleanup(uids.values())


async def test_a_job_bigger_than_the_free_capacity_waits_then_runs_once_kwok_frees_the_nodes(
    fleet_sandbox: KubeSandbox, kafka_settings: KafkaSettings, topics: Topics
) -> None:
    async with running_fleet(kafka_settings, topics, fleet_sandbox) as fleet:
        status = fleet.status
        blocker = await submit(
            fleet, jax_job("mc-blocker", workers=2, cpu="12", memory="16Gi", duration="6s")
        )
        uids = [blocker]
        try:
            await status.wait(lambda: JobPhase.RUNNING in status.phases(blocker), 60, "blocker")
            # The waiter comes right after Running, whether or not a heartbeat of large counts
            # the blocker's pods yet: the hub's reservation holds their room until one does.
            waiter = await submit(
                fleet, jax_job("mc-waiter", workers=2, cpu="12", memory="16Gi", duration="1s")
            )
            uids.append(waiter)

            def waiting() -> bool:
                return any(u.reason == "WaitingForCapacity" for u in status.history(waiter))

            await status.wait(waiting, 30, "the waiter to wait for capacity")
            waited = status.first(waiter, lambda u: u.reason == "WaitingForCapacity")
            assert waited.update.phase == JobPhase.QUEUED
            assert waited.update.message is not None and "large: " in waited.update.message
            await status.wait_finished(uids, timeout=90)

            blocker_pods = await assert_ran_only_where_placed(fleet, blocker, pods=2)
            waiter_pods = await assert_ran_only_where_placed(fleet, waiter, pods=2)
            assert {status.last(u).cluster for u in uids} == {"large"}
            freed = status.first(blocker, lambda u: u.phase == JobPhase.SUCCEEDED).time
            assigned = status.first(waiter, lambda u: u.phase == JobPhase.ASSIGNED).time
            assert waited.time < freed <= assigned
            # The waiter got the very nodes the blocker held (the only ones it fits on).
            nodes = {p["spec"]["nodeName"] for p in blocker_pods}
            assert nodes == {p["spec"]["nodeName"] for p in waiter_pods}
            assert nodes == {"large-node-0", "large-node-1"}
        finally:
            await fleet.cleanup(uids)


async def test_exit_code_1_fails_a_never_job_and_restarts_an_onfailure_job(
    fleet_sandbox: KubeSandbox, kafka_settings: KafkaSettings, topics: Topics
) -> None:
    never = jax_job("mc-never", workers=2, cpu="500m", memory="512Mi", duration="1s", exit_code="1")
    on_failure = jax_job(
        "mc-onfailure",
        workers=1,
        cpu="500m",
        memory="512Mi",
        duration="1s",
        exit_code="1",
        restart_policy="OnFailure",
    )
    on_failure["spec"]["runPolicy"]["backoffLimit"] = 2
    async with running_fleet(kafka_settings, topics, fleet_sandbox) as fleet:
        status = fleet.status
        uids = [await submit(fleet, never), await submit(fleet, on_failure)]
        try:
            await status.wait_finished(uids, timeout=90)
            failed = status.last(uids[0])
            assert failed.phase == JobPhase.FAILED, status
            assert JobPhase.RESTARTING not in status.phases(uids[0])
            assert failed.message is not None
            assert "exited with code 1 (restartPolicy Never)" in failed.message
            for pod in await pods_of(fleet.cluster(failed.cluster), uids[0]):
                assert pod["status"]["phase"] == "Failed"
                (container,) = pod["status"]["containerStatuses"]
                assert container["state"]["terminated"]["exitCode"] == 1

            restarted = status.history(uids[1])
            phases = [u.phase for u in restarted]
            assert phases.count(JobPhase.RESTARTING) == 2, status
            first = next(u for u in restarted if u.phase == JobPhase.RESTARTING)
            assert first.message is not None and "exited with code 1" in first.message
            assert restarted[-1].phase == JobPhase.FAILED
            assert restarted[-1].reason == "JAXJobFailed"
            assert restarted[-1].message is not None
            assert "reached the specified backoff limit (2)" in restarted[-1].message
            # The kubelet (KWOK) restarted the container in place; past the limit the job
            # stops: its crash-looping pod was deleted before the status went out.
            assert await pods_of(fleet.cluster(restarted[-1].cluster), uids[1]) == []
        finally:
            await fleet.cleanup(uids)


def _worker_process(
    fleet: Fleet, cluster_name: str, settings: KafkaSettings, logs: Path, name: str
) -> Process:
    cluster = fleet.cluster(cluster_name)
    args = [
        "worker",
        "--backend",
        "kube",
        "--cluster",
        cluster.name,
        "--kubeconfig",
        str(cluster.worker_kubeconfig),
        "--context",
        cluster.worker_context,
        "--bootstrap",
        settings.bootstrap,
        "--topic-prefix",
        fleet.topics.prefix,
        "--heartbeat-interval",
        "0.5",
        *(arg for ns in cluster.worker_namespaces for arg in ("--namespace", ns)),
    ]
    return Process(name, args, logs)


def _identity(pods: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    return {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["metadata"]["creationTimestamp"])
        for p in pods
    }


async def test_a_worker_killed_with_sigkill_adopts_its_pods_after_a_restart(
    fleet_sandbox: KubeSandbox, kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    async with running_fleet(kafka_settings, topics, fleet_sandbox, workers=()) as fleet:
        status = fleet.status
        cluster = fleet.cluster("small")
        first = _worker_process(fleet, "small", kafka_settings, tmp_path, "worker-1")
        second: Process | None = None
        uid = ""
        try:
            await fleet.wait_registered(["small"], timeout=60)
            document = jax_job("mc-adopted", workers=3, cpu="500m", memory="512Mi", duration="12s")
            uid = await submit(fleet, document)

            async def running_pods() -> list[dict[str, Any]]:
                pods = await pods_of(cluster, uid)
                return pods if [p["status"].get("phase") for p in pods] == ["Running"] * 3 else []

            async with asyncio.timeout(60):
                while True:
                    before = await running_pods()
                    if before:
                        break
                    await asyncio.sleep(0.2)
            services = _identity(await job_objects(cluster, "services", uid))
            assert len(services) == 3
            await status.wait(lambda: JobPhase.RUNNING in status.phases(uid), 30, "Running")
            first.kill()
            second = _worker_process(fleet, "small", kafka_settings, tmp_path, "worker-2")
            await status.wait(lambda: status.finished(uid), 90, "the adopted job to finish")

            final = status.last(uid)
            assert final.phase == JobPhase.SUCCEEDED, status
            assert final.cluster == "small"
            after = await pods_of(cluster, uid)
            assert _identity(after) == _identity(before)
            assert all(p["status"]["phase"] == "Succeeded" for p in after)
            assert _identity(await job_objects(cluster, "services", uid)) == services
            record = fleet.hub.ledger.get(uid)
            assert record is not None and record.phase == JobPhase.SUCCEEDED, record
            assert {u.attempt for u in status.history(uid) if u.cluster} == {1}
            assert second.popen.poll() is None, second.log()[-3000:]
        except BaseException:
            logs = (first.log() + (second.log() if second else ""))[-6000:]
            sys.stderr.write(f"--- worker logs ---\n{logs}\n")
            raise
        finally:
            first.terminate()
            if second is not None:
                assert second.terminate() in (0, -15), second.log()[-3000:]
            if uid:
                await fleet.cleanup([uid])


@pytest.mark.parametrize(
    "limit_namespaces",
    [True, False],
    ids=["backend-limited-to-default", "backend-unlimited-like-cli-without-namespace"],
)
async def test_the_least_privilege_identity_cannot_create_in_kube_system(
    fleet_sandbox: KubeSandbox,
    kafka_settings: KafkaSettings,
    topics: Topics,
    limit_namespaces: bool,
) -> None:
    """The worker advertises no namespaces, so the hub sends it the kube-system job; its
    identity may write only in `default`, whether or not its backend knows that."""
    async with running_fleet(
        kafka_settings,
        topics,
        fleet_sandbox,
        workers=["small"],
        advertise_namespaces=False,
        limit_namespaces=limit_namespaces,
    ) as fleet:
        status = fleet.status
        worker = fleet.workers["small"]
        refused = await submit(
            fleet, jax_job("mc-system", workers=1, cpu="100m", namespace="kube-system")
        )
        uids = [refused]
        try:
            await status.wait_finished([refused], timeout=60)
            final = status.last(refused)
            assert final.phase == JobPhase.FAILED, status
            assert final.cluster == "small"
            assert final.message is not None
            assert "may not create" in final.message and "forbidden" in final.message
            assert "namespace kube-system" in final.message
            assert await pods_of(fleet.cluster("small"), refused, "kube-system") == []
            crashed = worker.crashed
            assert crashed is not None and not crashed.done()

            after = await submit(fleet, jax_job("mc-after-refusal", workers=1, duration="1s"))
            uids.append(after)
            await status.wait_finished([after], timeout=60)
            await assert_ran_only_where_placed(fleet, after, pods=1)
            assert not crashed.done()
        finally:
            await fleet.cleanup(uids)
