"""One TrainJob per shipped training runtime (torch-distributed, mpi-distributed,
plain-distributed; not the torchtune ones, see NOT_ON_SANDBOX) through the whole flow on the
sandbox's real clusters: hub → `kube` workers → pods bound by kube-scheduler and run by kwok
→ Succeeded, with the objects upstream's runtime would make (torch's `PET_*` env and JobSet's
subdomain Service, MPI's hostfile ConfigMap and SSH keys' Secret).

kwok runs no containers: each shipped runtime is loaded as shipped, with its pod templates
annotated `trainhub.io/sim-duration` so that kwok ends their workload."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.events import JobStatusUpdate
from schemas.sim_annotations import SIM_DURATION
from schemas.status import JobPhase
from schemas.trainer_runtimes import (
    parse_runtime,
    runtime_catalog,
    shipped_runtimes,
)
from tests.kube.sandbox_access import job_objects, worker_backend
from trainhub.producer import follow_status, submit_document
from trainhub_sandbox.kube_cluster import KubeSandbox
from workers.backends.kube import KubeBackend
from workers.worker import Worker, WorkerConfig

pytestmark = pytest.mark.kube

SHIPPED = ("mpi-distributed", "plain-distributed", "torch-distributed")
NOT_ON_SANDBOX = ("torchtune-llama3.2-1b", "torchtune-llama3.2-3b")
"""Shipped, not run here: upstream's torchtune runtimes mount a PersistentVolumeClaim named
after the runtime in every pod, which upstream leaves to the user to create
(kubeflow/trainer#2630) and the sandbox has not, so kube-scheduler would leave their pods
Pending; their initializers fetch hf:// and their node asks for two GPUs. Their pods' objects
on an apiserver are test_kube_trainjob_initializers.py's; their TrainJob (a BuiltinTrainer's)
runs on `sim` in tests/sdk/test_trainer_builtin.py and renders in
tests/workers/test_frameworks_trainjob.py."""


def _simulated(runtime: dict[str, Any], duration: str) -> dict[str, Any]:
    """The runtime with every replicated job's pods annotated to end after `duration`."""
    document = copy.deepcopy(runtime)
    for job in document["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]
        pod.setdefault("metadata", {}).setdefault("annotations", {})[SIM_DURATION] = duration
    return document


@pytest.fixture
def simulated_runtimes() -> None:
    """The shipped runtimes replaced in this test's catalog (tests/conftest.py resets it)."""
    catalog = runtime_catalog()
    for runtime in shipped_runtimes():
        dumped = runtime.model_dump(mode="json", exclude_none=True, by_alias=True)
        catalog.add(parse_runtime(_simulated(dumped, "2s"), runtime.metadata.name))


@pytest.fixture
async def system(
    kube_sandbox: KubeSandbox, simulated_runtimes: None
) -> AsyncIterator[tuple[MemoryBus, Topics, dict[str, Worker]]]:
    bus, topics, registry = MemoryBus(), Topics(), CollectorRegistry()
    hub = Hub(bus, topics, HubConfig(max_heartbeat_age=10), registry=registry)
    workers = {
        name: Worker(
            bus,
            worker_backend(cluster),
            WorkerConfig(
                cluster=name,
                heartbeat_interval=0.5,
                namespaces=list(cluster.worker_namespaces),
            ),
            topics,
            registry=registry,
        )
        for name, cluster in kube_sandbox.clusters.items()
    }
    await bus.start()
    await hub.start()
    started: list[Worker] = []
    try:
        for worker in workers.values():
            await worker.start()
            started.append(worker)
        yield bus, topics, workers
    finally:
        for worker in started:
            await worker.stop()
        await hub.stop()
        await bus.close()


def _trainjob(runtime: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": f"e2e-{runtime}", "namespace": "default"},
        "spec": {
            "runtimeRef": {"name": runtime},
            "managedBy": "trainhub.io/dispatcher",
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {"requests": {"cpu": "500m", "memory": "512Mi"}},
            },
        },
    }


def _env(pod: dict[str, Any]) -> dict[str, str]:
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


async def test_one_trainjob_per_shipped_runtime_succeeds_on_the_sandbox(
    system: tuple[MemoryBus, Topics, dict[str, Worker]], kube_sandbox: KubeSandbox
) -> None:
    bus, topics, workers = system
    assert {r.metadata.name for r in shipped_runtimes()} == set(SHIPPED) | set(NOT_ON_SANDBOX)
    uids = {runtime: await submit_document(bus, topics, _trainjob(runtime)) for runtime in SHIPPED}
    finals: dict[str, JobStatusUpdate] = {}
    try:
        async with asyncio.timeout(120):
            async for update in follow_status(bus, topics, set(uids.values())):
                if update.phase.finished:
                    finals[update.uid] = update
                    if len(finals) == len(uids):
                        break
        for runtime, uid in uids.items():
            final = finals[uid]
            assert final.phase == JobPhase.SUCCEEDED, (runtime, final)
            conditions = final.status.conditions if final.status else []
            assert ("Complete", "True") in [(c.type, c.status) for c in conditions], runtime
            cluster = kube_sandbox.clusters[final.cluster or ""]
            pods = {p["metadata"]["name"]: p for p in await job_objects(cluster, "pods", uid)}
            # The phases a worker answers pod requests with, for a run it no longer needs,
            # from its one list call: as the apiserver has them.
            listed = await workers[final.cluster or ""].backend.job_pods(uid)
            assert {(p.name, p.phase, p.node_name) for p in listed} == {
                (name, pod["status"]["phase"], pod["spec"]["nodeName"])
                for name, pod in pods.items()
            }, runtime
            assert all(p.namespace == "default" and p.start_time for p in listed), listed
            name = f"e2e-{runtime}"
            if runtime == "mpi-distributed":
                # runLauncherAsNode: the launcher is one of the two nodes.
                assert set(pods) == {f"{name}-launcher-0-0", f"{name}-node-0-0"}
                maps = await job_objects(cluster, "configmaps", uid)
                hostfile = next(m for m in maps if m["metadata"]["name"] == f"{name}-mpi-hostfile")
                assert len(hostfile["data"]["hostfile"].splitlines()) == 2
                launcher = pods[f"{name}-launcher-0-0"]
                assert launcher["status"]["phase"] == "Succeeded"
                # Upstream's MPI plugin: the SSH keys' immutable Secret, on every pod.
                (secret,) = await job_objects(cluster, "secrets", uid)
                assert secret["metadata"]["name"] == f"{name}-mpi-ssh-auth"
                assert secret["type"] == "kubernetes.io/ssh-auth" and secret["immutable"]
                assert sorted(secret["data"]) == ["ssh-privatekey", "ssh-publickey"]
                for pod in pods.values():
                    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
                    assert (
                        volumes["mpi-ssh-auth"]["secret"]["secretName"]
                        == secret["metadata"]["name"]
                    )
                    node = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
                    mounts = {m["name"]: m["mountPath"] for m in node["volumeMounts"]}
                    assert mounts["mpi-ssh-auth"] == "/home/mpiuser/.ssh"
            else:
                assert set(pods) == {f"{name}-node-0-0", f"{name}-node-0-1"}
                for pod in pods.values():
                    assert pod["spec"]["nodeName"] in cluster.node_names
                    assert pod["status"]["phase"] == "Succeeded"
            if runtime == "torch-distributed":
                ranks = sorted(_env(p)["PET_NODE_RANK"] for p in pods.values())
                assert ranks == ["0", "1"]
                assert {_env(p)["PET_NNODES"] for p in pods.values()} == {"2"}
                assert {_env(p)["PET_MASTER_PORT"] for p in pods.values()} == {"29500"}
                # Upstream's Torch plugin: node 0 under the JobSet's subdomain, a headless
                # Service named after the TrainJob whose pods carry hostname and subdomain.
                master = f"{name}-node-0-0.{name}"
                assert {_env(p)["PET_MASTER_ADDR"] for p in pods.values()} == {master}
                for pod_name, pod in pods.items():
                    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (pod_name, name)
                services = {
                    s["metadata"]["name"]: s for s in await job_objects(cluster, "services", uid)
                }
                subdomain = services[name]["spec"]
                assert subdomain["clusterIP"] == "None" and subdomain["publishNotReadyAddresses"]
        # Deleted with its job, by label (the worker may not list Secrets); also by a sweep
        # of a worker watching every namespace, which knows the job only by its objects.
        mpi = finals[uids["mpi-distributed"]]
        member = kube_sandbox.clusters[mpi.cluster or ""]
        everywhere = KubeBackend(
            member.admin_kubeconfig, cluster=member.name, context=member.admin_context
        )
        await everywhere.start()
        try:
            await everywhere.delete_job(mpi.uid)  # no namespace, as adoption's sweep may
        finally:
            await everywhere.close()
        assert await job_objects(member, "pods", mpi.uid) == []
        assert await job_objects(member, "secrets", mpi.uid) == []
    finally:
        for worker in workers.values():
            for uid in uids.values():
                await worker.backend.delete_job(uid)
