"""The local backend's own behaviour: pods that wait for their master without blocking the
worker, environments resolved like the kubelet's, restarts under the same name."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from schemas.job_parsing import parse_job
from tests.workers.job_documents import job_document, replica
from workers.backends.base import PodObservation
from workers.backends.local import CannotRunLocally, LocalBackend
from workers.cluster_spec import parse_cluster_spec
from workers.network import LoopbackNetwork
from workers.rendering import PodPlan, RenderedJob, render_job


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    local = LocalBackend(
        parse_cluster_spec("here:cpu=4,memory=8Gi").pool(),
        workdir=tmp_path,
        logs_dir=tmp_path / "logs",
        master_wait_tries=100,
        master_wait_interval=0.1,
    )
    await local.start()
    try:
        yield local
    finally:
        await local.close()


def torch_job(name: str, worker_code: str, master_code: str = "pass") -> RenderedJob:
    def script(code: str) -> dict[str, Any]:
        return replica(1, restart_policy="Never", command=[sys.executable, "-c", code])

    document = job_document(
        "PyTorchJob", name, {"Master": script(master_code), "Worker": script(worker_code)}
    )
    return render_job(parse_job(document), LoopbackNetwork(), wait_for_master=False)


async def next_observation(backend: LocalBackend, timeout: float = 10.0) -> PodObservation:
    return await asyncio.wait_for(backend.observations.get(), timeout)


async def test_a_worker_pod_starts_only_once_its_master_accepts_connections(
    backend: LocalBackend,
) -> None:
    job = torch_job("waits", "print('worker started')")
    worker = job.pods[1]
    assert worker.master_address is not None and job.pods[0].master_address is None
    host, port = worker.master_address
    assert worker.spec.initContainers is None  # the backend waits, not an init container

    began = time.monotonic()
    await backend.create_pod(job.job.uid, worker)
    assert time.monotonic() - began < 0.5  # create_pod does not wait for the master
    pending = await next_observation(backend)
    assert (pending.name, pending.phase) == ("waits-worker-0", "Pending")
    assert job.job.uid in (await backend.capacity()).jobs  # its node room is taken already
    await asyncio.sleep(0.6)
    assert backend.observations.empty()  # still waiting: no process yet

    probes = 0

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal probes
        probes += 1
        writer.close()

    server = await asyncio.start_server(accept, host, port)
    async with server:
        running = await next_observation(backend)
        assert running.phase == "Running"
        done = await next_observation(backend)
    assert (done.phase, done.exit_code) == ("Succeeded", 0)
    assert probes == 1
    assert "worker started" in await backend.pod_logs(job.job.uid, "waits-worker-0")


async def test_a_worker_gives_up_on_a_master_that_never_listens(tmp_path: Path) -> None:
    backend = LocalBackend(
        parse_cluster_spec("here:cpu=1,memory=1Gi").pool(),
        workdir=tmp_path,
        logs_dir=tmp_path / "logs",
        master_wait_tries=3,
        master_wait_interval=0.05,
    )
    job = torch_job("alone", "print('never')")
    await backend.create_pod(job.job.uid, job.pods[1])
    try:
        assert (await next_observation(backend)).phase == "Pending"
        failed = await next_observation(backend)
        assert (failed.phase, failed.exit_code) == ("Failed", 1)
        host, port = job.pods[1].master_address or ("", 0)
        assert failed.message == (
            f"the master at {host}:{port} did not accept connections after 3 tries 0.05s apart"
        )
        assert (await backend.capacity()).jobs == set()  # the room is free again
    finally:
        await backend.close()


async def test_deleting_a_waiting_pod_starts_nothing(backend: LocalBackend) -> None:
    job = torch_job("cancelled", "import pathlib; pathlib.Path('ran').touch()")
    worker = job.pods[1]
    await backend.create_pod(job.job.uid, worker)
    assert (await next_observation(backend)).phase == "Pending"
    await backend.delete_pod(job.job.uid, worker.name, worker.namespace)
    host, port = worker.master_address or ("", 0)
    server = await asyncio.start_server(lambda r, w: w.close(), host, port)
    async with server:
        await asyncio.sleep(0.4)
    assert backend.observations.empty()
    assert not (backend.workdir / "ran").exists()
    assert await backend.job_uids() == set()


async def test_a_pod_recreated_under_its_name_keeps_its_node_room(backend: LocalBackend) -> None:
    document = job_document(
        "JAXJob",
        "again",
        {
            "Worker": replica(
                1, cpu="3", command=[sys.executable, "-c", "import time; time.sleep(30)"]
            )
        },
    )
    job = render_job(parse_job(document), LoopbackNetwork())
    pod: PodPlan = job.pods[0]
    await backend.create_pod(job.job.uid, pod)
    assert (await next_observation(backend)).phase == "Running"
    await backend.delete_pod(job.job.uid, pod.name, pod.namespace)
    await backend.create_pod(job.job.uid, pod)
    assert (await next_observation(backend)).phase == "Running"
    await asyncio.sleep(0.2)  # the first process's end must not free the second one's room
    (node,) = (await backend.capacity()).nodes
    assert node.requested["cpu"] == 3
    assert backend.observations.empty()


async def test_environment_and_arguments_resolve_like_the_kubelets(backend: LocalBackend) -> None:
    code = "import os, sys; print(os.environ['PADDLE_MASTER'], os.environ['SELF'], *sys.argv[1:])"
    document = job_document(
        "PaddleJob",
        "paddle",
        {"Worker": replica(1, command=[sys.executable, "-c", code, "$(POD_IP_DUMMY)", "$$(X)"])},
    )
    document["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "SELF", "value": "$(PADDLE_JOB_ID)@$(POD_IP_DUMMY)"}
    ]
    job = render_job(parse_job(document), LoopbackNetwork())
    pod = job.pods[0]
    await backend.create_pod(job.job.uid, pod)
    assert (await next_observation(backend)).phase == "Running"
    done = await next_observation(backend)
    assert done.phase == "Succeeded", await backend.pod_logs(job.job.uid, pod.name)
    logs = await backend.pod_logs(job.job.uid, pod.name)
    master, own, *args = logs.split()
    assert master.startswith("127.0.0.1:") and master != "127.0.0.1:36543"
    assert own == "paddle@127.0.0.1"
    assert args == ["127.0.0.1", "$(X)"]


async def test_an_unresolvable_variable_refuses_the_pod_for_good(backend: LocalBackend) -> None:
    # No restart would resolve it: refused, which fails the job at once (issue 29).
    document = job_document("JAXJob", "secretive", {"Worker": replica(1)})
    container = document["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    job = render_job(parse_job(document), LoopbackNetwork())
    with pytest.raises(CannotRunLocally) as refused:
        await backend.create_pod(job.job.uid, job.pods[0])
    assert str(refused.value) == (
        "pod secretive-worker-0: env T: secretKeyRef cannot be read on the local backend"
    )
    assert not refused.value.transient


ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    """Running, not a zombie nobody reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


_KILLED_WORKER = """
import asyncio, os, signal, sys
from pathlib import Path
from schemas.job_parsing import parse_job
from tests.workers.job_documents import job_document, replica
from workers.backends.local import CannotRunLocally, LocalBackend
from workers.cluster_spec import parse_cluster_spec
from workers.network import LoopbackNetwork
from workers.rendering import render_job

async def main(folder: Path) -> None:
    backend = LocalBackend(
        parse_cluster_spec("here:cpu=4,memory=8Gi").pool(), workdir=folder, logs_dir=folder
    )
    await backend.start()
    pid_file = folder / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    command = [sys.executable, "-c", code]
    document = job_document("JAXJob", "orphan", {"Worker": replica(1, command=command)})
    job = render_job(parse_job(document), LoopbackNetwork())
    await backend.create_pod(job.job.uid, job.pods[0])
    while not pid_file.exists() or not pid_file.read_text():
        await asyncio.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies without a goodbye

asyncio.run(main(Path(sys.argv[1])))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signals are Linux's")
async def test_a_killed_workers_pods_die_with_it(tmp_path: Path) -> None:
    # Else they ran on as orphans beside the pods the next worker creates again.
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _KILLED_WORKER, str(tmp_path), cwd=ROOT, env={"PYTHONPATH": str(ROOT)}
    )
    assert await asyncio.wait_for(worker.wait(), 30) == -9
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        await asyncio.sleep(0.05)
    os.kill(pid, 9)
    raise AssertionError(f"pod process {pid} outlived its killed worker")
