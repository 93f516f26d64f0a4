"""A restarted worker and the jobs whose own object (their CR on a member cluster) went with
everything it owned while no worker watched (`kubectl delete`, then the garbage collector):
they fail as they would have under a watching worker, while a job whose assignment was only
written meanwhile, and not carried out yet, starts. On the sim backend, its objects kept
across the restart, each job taken for one with an object of its own."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from bus.memory import MemoryBus
from bus.topics import Topics
from schemas.kubeflow import AnyJob
from schemas.status import JobPhase
from tests.workers.test_worker_runtime import CLUSTER, Harness, jax
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.worker import Worker, WorkerConfig


class OwningSim(SimBackend):
    """Pods that outlive the worker, each job owned by an object of its own (but `plain`)."""

    keeps_pods = True

    def __init__(self) -> None:
        super().__init__(parse_cluster_spec(f"{CLUSTER}:cpu=8,memory=16Gi").pool())

    def makes_job_object(self, job: AnyJob) -> bool:
        return job.metadata.name != "plain"


def _config() -> WorkerConfig:
    return WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.1)


@pytest.mark.parametrize("sent_again", [False, True])
async def test_a_job_whose_object_and_pods_went_while_away_fails_after_a_restart(
    sent_again: bool,
) -> None:
    """`sent_again`: the hub sends the restarted worker its jobs' assignments again (as it
    does when a new worker process reports the cluster)."""
    bus, topics = MemoryBus(), Topics()
    await bus.start()
    backend = OwningSim()
    first = Worker(bus, backend, _config(), topics, registry=CollectorRegistry())
    await first.start()
    h = Harness(bus, topics, first, CollectorRegistry())
    second: Worker | None = None
    try:
        gone = await h.assign(jax("gone", workers=1, cpu="1", duration="60s"))
        kept = await h.assign(jax("kept", workers=1, cpu="1", duration="60s"))
        plain = await h.assign(jax("plain", workers=1, cpu="1", duration="60s"))
        for uid in (gone, kept, plain):
            await h.until_phase(uid, JobPhase.RUNNING)
        await first.stop()
        # While no worker watches: the collector takes everything of two jobs, and the hub
        # assigns a third (not carried out yet when the next worker starts).
        await backend.delete_job(gone)
        await backend.delete_job(plain)
        late = await h.assign(jax("late", workers=1, cpu="1", duration="60s"))
        published = len(h.updates(plain))
        told = len(h.updates(gone))

        second = Worker(bus, backend, _config(), topics, registry=CollectorRegistry())
        await second.start()
        h = Harness(bus, topics, second, h.registry)
        if sent_again:
            await h.assign(jax("gone", workers=1, cpu="1", duration="60s"))
        await h.until_phase(gone, JobPhase.FAILED)
        last = h.updates(gone)[-1]
        assert last.message == (
            f"JAXJob gone cannot run on {CLUSTER}: JAXJob gone was deleted on {CLUSTER} "
            "before it ended."
        )
        assert last.attempt == 1
        assert h.phases(gone)[told:] == [JobPhase.FAILED]  # not made again first
        await h.until_phase(late, JobPhase.RUNNING)
        assert JobPhase.FAILED not in h.phases(late)
        assert h.worker._vanished == {}
        # The adopted job runs on; one without an object of its own is not judged here.
        assert kept in h.worker.runs and not h.worker.runs[kept].finished
        assert plain not in h.worker.runs
        assert JobPhase.FAILED not in h.phases(kept) + h.phases(plain)
        assert len(h.updates(plain)) == published
        assert await backend.job_pod_names(gone) == []
    finally:
        if second is not None:
            await second.stop()
        await bus.close()
