"""What a worker keeps of its finished jobs: the runs leave its hands `run_retention` after
they finished, the sim backend's ended pods with them, and what is left in a cluster that
keeps its objects is still found by label (a revocation deletes it, a log request reads it,
a TTL still runs out). Counted in tables, not timed, so a regression shows on any machine."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from schemas.events import LogsRequested
from schemas.job_parsing import parse_job
from schemas.status import JobPhase
from tests.workers.job_documents import job_document, replica
from tests.workers.test_worker_runtime import CLUSTER, Harness, running, sim
from trainhub.producer import request_logs
from workers.backends.local import LocalBackend
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.rendering import render_job
from workers.worker import WorkerConfig

RETENTION = 0.3


def config() -> WorkerConfig:
    return WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.2, run_retention=RETENTION)


def jax(name: str, *, clean: str | None = "None", **run_policy: Any) -> dict[str, Any]:
    if clean is not None:
        run_policy["cleanPodPolicy"] = clean
    return job_document(
        "JAXJob", name, {"Worker": replica(2, duration="0.05s")}, run_policy=run_policy
    )


class ClusterSim(SimBackend):
    """A sim whose objects outlive the worker's memory of them, as a real cluster's do."""

    keeps_pods = True

    def forget_job(self, job_uid: str) -> None:
        pass


def jobs_gauge(h: Harness, phase: JobPhase) -> float | None:
    labels = {"cluster": CLUSTER, "phase": phase.value, "framework": "jax"}
    return h.registry.get_sample_value("trainhub_worker_jobs", labels)


async def test_finished_runs_and_their_sim_pods_leave_after_the_retention() -> None:
    backend = sim(capacity="cpu=8,memory=16Gi")
    async with running(backend, config()) as h:
        uids = [await h.assign(jax(f"done-{i}")) for i in range(20)]
        for uid in uids:
            await h.until_phase(uid, JobPhase.SUCCEEDED)
        assert await backend.job_pod_names(uids[-1]) == ["done-19-worker-0", "done-19-worker-1"]
        await h.until(lambda: not h.worker.runs, timeout=5)
        await h.until(lambda: not backend._pods, timeout=5)
        assert backend._jobs == {} and backend._services == {} and backend._running == {}
        assert await backend.job_uids() == set()
        assert h.worker._timers.retiring == {} and h.worker._timers.armed == {}
        assert backend.backoff._created == {}
        assert jobs_gauge(h, JobPhase.SUCCEEDED) == 0
        # Retired, not revoked: each job's status ended Succeeded and was said once.
        for uid in uids:
            assert h.phases(uid).count(JobPhase.SUCCEEDED) == 1


async def test_a_finished_run_stays_within_the_retention() -> None:
    long = WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.2, run_retention=60)
    backend = sim()
    async with running(backend, long) as h:
        uid = await h.assign(jax("kept"))
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        await h.worker._timers.retire_due()
        assert h.worker.runs[uid].phase == JobPhase.SUCCEEDED
        assert await backend.job_uids() == {uid}
        assert jobs_gauge(h, JobPhase.SUCCEEDED) == 1


async def test_a_revocation_deletes_the_pods_of_a_run_that_left() -> None:
    backend = ClusterSim(parse_cluster_spec(f"{CLUSTER}:cpu=4,memory=8Gi").pool())
    async with running(backend, config()) as h:
        uid = await h.assign(jax("left"))
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        await h.until(lambda: uid not in h.worker.runs, timeout=5)
        assert await backend.job_uids() == {uid}  # cleanPodPolicy None: the pods stay

        # Its logs are still read, from the pods the cluster keeps.
        request = LogsRequested(
            request_id=str(uuid.uuid4()),
            uid=uid,
            deadline=datetime.now(UTC) + timedelta(seconds=10),
        )
        chunks = [c async for c in request_logs(h.bus, h.topics, CLUSTER, request)]
        assert {c.pod for c in chunks if c.text} == {"left-worker-0", "left-worker-1"}
        assert chunks[-1].final and chunks[-1].error is None

        await h.revoke(uid)
        await h.until(lambda: not backend._pods)
        assert await backend.job_uids() == set()


async def test_a_ttl_longer_than_the_retention_still_deletes_the_job() -> None:
    backend = ClusterSim(parse_cluster_spec(f"{CLUSTER}:cpu=4,memory=8Gi").pool())
    async with running(backend, config()) as h:
        uid = await h.assign(jax("ttl", ttlSecondsAfterFinished=1))
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        await h.until(lambda: uid not in h.worker.runs, timeout=5)
        assert await backend.job_uids() == {uid}
        assert uid in h.worker._timers.armed  # the TTL runs on without the run
        await h.until(lambda: not backend._pods, timeout=5)
        assert h.worker._timers.armed == {}


async def test_a_new_assignment_of_the_job_cancels_the_ttl_of_the_run_that_left() -> None:
    backend = ClusterSim(parse_cluster_spec(f"{CLUSTER}:cpu=4,memory=8Gi").pool())
    async with running(backend, config()) as h:
        document = jax("again", ttlSecondsAfterFinished=1)
        document["spec"]["jaxReplicaSpecs"]["Worker"] = replica(2, duration="30s", container="jax")
        uid = await h.assign(jax("again", ttlSecondsAfterFinished=1))
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        await h.until(lambda: uid not in h.worker.runs, timeout=5)
        await h.revoke(uid)
        await h.assign(document, attempt=2)
        await h.until(lambda: uid in h.worker.runs and h.worker.runs[uid].attempt == 2)
        await h.until_phase(uid, JobPhase.RUNNING)
        await h.until(lambda: uid not in h.worker._timers.armed)
        assert await backend.job_uids() == {uid}


async def test_a_local_job_whose_run_left_is_still_revoked(tmp_path: Path) -> None:
    backend = LocalBackend(
        parse_cluster_spec(f"{CLUSTER}:cpu=4,memory=8Gi").pool(),
        workdir=tmp_path,
        logs_dir=tmp_path / "logs",
    )
    async with running(backend, config()) as h:
        uid = await h.assign(jax("here"))
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        await h.until(lambda: uid not in h.worker.runs, timeout=5)
        assert await backend.job_pod_names(uid) == ["here-worker-0", "here-worker-1"]
        await h.revoke(uid)
        await h.until(lambda: not backend._pods)
        assert await backend.job_uids() == set()


async def test_a_sim_pod_still_running_when_its_job_is_forgotten_goes_when_it_ends() -> None:
    backend = sim()
    await backend.start()
    try:
        document = job_document(
            "JAXJob",
            "slow",
            {"Worker": replica(1, duration="0.2s")},
            run_policy={"cleanPodPolicy": "None"},
        )
        rendered = render_job(parse_job(document))
        await backend.create_pod(rendered.job.uid, rendered.pods[0])
        backend.forget_job(rendered.job.uid)
        assert await backend.job_uids() == {rendered.job.uid}  # running: it stays
        while (await backend.observations.get()).phase != "Succeeded":
            pass
        assert backend._pods == {} and backend._jobs == {}
    finally:
        await backend.close()
