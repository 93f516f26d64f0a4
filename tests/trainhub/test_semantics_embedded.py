"""Training Operator semantics end to end (producer → hub → worker → status): every kind on
the sim backend, runPolicy, restartPolicy, suspend/resume, and real processes on `local`."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bus.events import publish_event
from schemas.events import EventType, JobRef, JobStatusUpdate, make_event
from schemas.status import JobPhase
from tests.workers.job_documents import job_document, replica
from trainhub.embedded import Embedded, EmbeddedOptions
from workers.cluster_spec import parse_cluster_spec

ROOT = Path(__file__).resolve().parents[2]
LONG = "30s"


def _options(backend: str = "sim", **extra: Any) -> EmbeddedOptions:
    return EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=8,memory=16Gi")],
        backend=backend,
        heartbeat_interval=0.2,
        **extra,
    )


@pytest.fixture
async def system() -> AsyncIterator[Embedded]:
    async with Embedded(_options()) as running:
        yield running


async def _history(system: Embedded, uid: str, timeout: float = 20) -> list[JobStatusUpdate]:
    """Worker updates until the job finished."""
    seen: list[JobStatusUpdate] = []
    await system.wait_finished([uid], seen.append, timeout=timeout)
    return seen


def _worker_updates(updates: list[JobStatusUpdate]) -> list[JobStatusUpdate]:
    # A worker numbers its updates; the hub's (Queued, Assigned, ...) carry sequence 0.
    return [u for u in updates if u.sequence > 0]


async def _ledger_phase(system: Embedded, uid: str, phase: JobPhase) -> None:
    async with asyncio.timeout(5):
        while True:
            record = system.hub.ledger.get(uid)
            if record is not None and record.phase == phase:
                return
            await asyncio.sleep(0.05)


# -- every kind, with its success rule --------------------------------------------------------

KIND_CASES: dict[str, dict[str, Any]] = {
    # No Chief: worker 0 decides; the PS would run on for ever and cleanPodPolicy removes it.
    "TFJob": {
        "replicas": {"PS": replica(1, duration=LONG), "Worker": replica(2)},
        "run_policy": {"cleanPodPolicy": "Running"},
    },
    "PyTorchJob": {"replicas": {"Master": replica(1), "Worker": replica(2)}},
    "XGBoostJob": {"replicas": {"Master": replica(1), "Worker": replica(1, duration=LONG)}},
    # The launcher's phase is the job's; the workers wait for mpirun for ever.
    "MPIJob": {
        "replicas": {"Launcher": replica(1), "Worker": replica(2, duration=LONG)},
        "run_policy": {"cleanPodPolicy": "All"},
    },
    "PaddleJob": {"replicas": {"Worker": replica(2)}},
    "JAXJob": {"replicas": {"Worker": replica(2)}},
}


@pytest.mark.parametrize("kind", sorted(KIND_CASES))
async def test_every_kind_runs_to_succeeded(system: Embedded, kind: str) -> None:
    case = KIND_CASES[kind]
    name = f"every-{kind.lower()}"
    uid = await system.submit(
        job_document(kind, name, case["replicas"], run_policy=case.get("run_policy"))
    )
    updates = await _history(system, uid)
    final = updates[-1]
    assert final.phase == JobPhase.SUCCEEDED, final
    assert final.reason == f"{kind}Succeeded"
    assert final.status is not None and final.status.completionTime is not None
    phases = [u.phase for u in _worker_updates(updates)]
    assert phases[0] == JobPhase.CREATED and JobPhase.RUNNING in phases
    if case.get("run_policy"):  # the pods that would have run on are gone
        assert uid not in (await system.workers[0].backend.capacity()).jobs
    await _ledger_phase(system, uid, JobPhase.SUCCEEDED)


# -- runPolicy --------------------------------------------------------------------------------


def jax(name: str, workers: int = 2, run_policy: dict[str, Any] | None = None, **kw: Any) -> Any:
    return job_document("JAXJob", name, {"Worker": replica(workers, **kw)}, run_policy=run_policy)


async def test_active_deadline_fails_the_job_on_time(system: Embedded) -> None:
    uid = await system.submit(
        jax("deadline", duration=LONG, run_policy={"activeDeadlineSeconds": 2})
    )
    created_at: float | None = None

    def note(update: JobStatusUpdate) -> None:
        nonlocal created_at
        if update.phase == JobPhase.CREATED and created_at is None:
            created_at = time.monotonic()

    final = (await system.wait_finished([uid], note, timeout=15))[uid]
    assert created_at is not None
    assert 1.8 <= time.monotonic() - created_at < 4.5
    assert final.phase == JobPhase.FAILED
    assert final.reason == "JAXJobFailed"
    assert final.message == (
        "Job deadline has failed because it was active longer than specified deadline"
    )
    await _ledger_phase(system, uid, JobPhase.FAILED)
    assert await system.workers[0].backend.job_uids() == set()


async def test_exit_code_restarts_reach_the_backoff_limit(system: Embedded) -> None:
    uid = await system.submit(
        jax(
            "backoff",
            workers=1,
            restart_policy="ExitCode",
            exit_code=137,
            duration="0.1s",
            run_policy={"backoffLimit": 2},
        )
    )
    updates = await _history(system, uid)
    assert [u.phase for u in updates].count(JobPhase.RESTARTING) == 2
    assert updates[-1].phase == JobPhase.FAILED
    assert updates[-1].reason == "JAXJobFailed"
    assert "reached the specified backoff limit (2)" in (updates[-1].message or "")


async def test_a_permanent_exit_code_fails_without_a_restart(system: Embedded) -> None:
    uid = await system.submit(
        jax("permanent", workers=1, restart_policy="ExitCode", exit_code=3, duration="0.1s")
    )
    updates = await _history(system, uid)
    assert JobPhase.RESTARTING not in [u.phase for u in updates]
    assert updates[-1].reason == "JAXJobFailed"
    assert "exited with code 3 (restartPolicy ExitCode)" in (updates[-1].message or "")


async def test_ttl_deletes_the_job_so_its_name_can_be_submitted_again(system: Embedded) -> None:
    """As Kubeflow's job objects are garbage-collected ttlSecondsAfterFinished after they
    finish: the worker removes the run's objects, the hub deletes the job (its Succeeded
    status stays in the history), and the same job can be submitted again and runs."""
    document = jax("ttl", duration="0.1s", run_policy={"ttlSecondsAfterFinished": 1})
    uid = await system.submit(document)
    await system.wait_finished([uid], timeout=20)
    worker = system.workers[0]
    assert uid in worker.runs
    await _ledger_phase(system, uid, JobPhase.SUCCEEDED)
    async with asyncio.timeout(5):
        while True:
            if uid not in worker.runs:
                break
            await asyncio.sleep(0.05)
    assert await worker.backend.job_uids() == set()
    await _ledger_phase(system, uid, JobPhase.DELETED)
    record = system.hub.ledger.get(uid)
    assert record is not None and record.message is not None and record.reason == "TTLExpired"
    assert "ttlSecondsAfterFinished (1s)" in record.message
    again = await system.submit(document)
    assert again == uid
    async with asyncio.timeout(20):
        while True:
            record = system.hub.ledger.get(uid)
            assert record is not None and record.reason != "AlreadyExists", record
            if record.phase == JobPhase.SUCCEEDED:
                break
            await asyncio.sleep(0.05)
    assert record.attempt == 2  # a new run: its worker cannot take it for the old one


async def test_suspend_and_resume_reach_the_worker_on_its_assignments_topic(
    system: Embedded,
) -> None:
    """The hub forwards the producer's requests on the cluster's assignments topic; here the
    request is put there as the hub will, so the worker's side is tested on its own."""
    uid = await system.submit(jax("pausing", duration="1s"))
    seen: list[JobStatusUpdate] = []

    async def send(event_type: str) -> None:
        event = make_event(event_type, "trainhub/hub", uid, JobRef(uid=uid))
        await publish_event(system.bus, system.topics.assignments("solo"), uid, event)

    async def follow() -> None:
        async for update in system.updates([uid]):
            seen.append(update)
            if update.phase == JobPhase.RUNNING and JobPhase.SUSPENDED not in _phases(seen):
                await send(EventType.JOB_SUSPENDED)
            elif update.phase == JobPhase.SUSPENDED:
                await asyncio.sleep(1.2)  # longer than the pods would have run
                await send(EventType.JOB_RESUMED)
            elif update.phase.finished:
                return

    async with asyncio.timeout(20):
        await follow()
    phases = _phases(_worker_updates(seen))
    assert phases[-4:] == [
        JobPhase.SUSPENDED,
        JobPhase.CREATED,
        JobPhase.RUNNING,
        JobPhase.SUCCEEDED,
    ]
    suspended = next(u for u in seen if u.phase == JobPhase.SUSPENDED)
    assert suspended.reason == "JAXJobSuspended"
    resumed = next(u for u in seen if u.reason == "JAXJobResumed")
    assert resumed.status is not None and suspended.status is not None
    assert resumed.status.startTime and suspended.status.startTime
    assert resumed.status.startTime > suspended.status.startTime
    await _ledger_phase(system, uid, JobPhase.SUCCEEDED)


def _phases(updates: list[JobStatusUpdate]) -> list[JobPhase]:
    return [u.phase for u in updates]


# -- real processes ---------------------------------------------------------------------------

MASTER = """
import os, socket, time
time.sleep(1.5)  # the worker must wait for this, it does not retry on its own
with socket.create_server((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))) as s:
    s.settimeout(60)
    while True:
        conn, _ = s.accept()
        with conn:
            data = conn.recv(64).decode()
        if data:  # the local backend's readiness probe connects and sends nothing
            break
print("master on", os.environ["MASTER_PORT"], "heard", data, "of", os.environ["WORLD_SIZE"])
"""

WORKER = """
import os, socket
address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
with socket.create_connection(address, timeout=10) as conn:
    conn.sendall(("rank " + os.environ["RANK"]).encode())
print("worker reached the master at", *address)
"""


async def test_pytorch_worker_waits_for_its_master_on_the_local_backend(tmp_path: Path) -> None:
    def script(code: str) -> dict[str, Any]:
        # Never: a worker that started too early would fail the job instead of retrying.
        return replica(1, restart_policy="Never", cpu="250m", command=[sys.executable, "-c", code])

    document = job_document(
        "PyTorchJob", "rendezvous", {"Master": script(MASTER), "Worker": script(WORKER)}
    )
    options = _options("local", logs_dir=tmp_path, workdir=ROOT)
    async with Embedded(options) as system:
        uid = await system.submit(document)
        updates = await _history(system, uid, timeout=60)
        logs = await system.pod_logs(updates[-1])
        assert updates[-1].phase == JobPhase.SUCCEEDED, logs
        assert JobPhase.RESTARTING not in _phases(updates)
        master, worker = logs["rendezvous-master-0"], logs["rendezvous-worker-0"]
        port = master.split()[2]
        assert master.strip() == f"master on {port} heard rank 1 of 2"
        assert worker.strip() == f"worker reached the master at 127.0.0.1 {port}"
        assert port != "23456"  # remapped by the job's loopback network
