"""A worker told that a job's own object was deleted by someone else (direct mode on a
cluster with the Kubeflow CRDs): the running job fails and its pods go; another attempt's
object, or a job that ended already, changes nothing. On the sim backend, which never reports
one itself."""

from __future__ import annotations

import asyncio

from schemas.status import JobPhase
from tests.workers.test_worker_runtime import CLUSTER, jax, running, sim
from workers.backends.base import JobObjectLost


async def test_the_running_job_fails_and_its_pods_go() -> None:
    backend = sim()
    async with running(backend) as h:
        uid = await h.assign(jax("lost", duration="60s"))
        await h.until_phase(uid, JobPhase.RUNNING)
        await backend.job_object_losses.put(JobObjectLost(uid, 1, "JAXJob lost"))
        await h.until_phase(uid, JobPhase.FAILED)
        assert h.updates(uid)[-1].message == (
            f"JAXJob lost cannot run on {CLUSTER}: JAXJob lost was deleted on {CLUSTER} "
            "before it ended."
        )
        assert await backend.job_pod_names(uid) == []


async def test_another_attempt_s_object_or_an_ended_job_s_changes_nothing() -> None:
    backend = sim()
    async with running(backend) as h:
        uid = await h.assign(jax("kept", duration="60s"))
        await h.until_phase(uid, JobPhase.RUNNING)
        await backend.job_object_losses.put(JobObjectLost(uid, 7, "JAXJob kept"))
        done = await h.assign(jax("done", duration="0.05s"))
        await h.until_phase(done, JobPhase.SUCCEEDED)
        await backend.job_object_losses.put(JobObjectLost(done, 1, "JAXJob done"))
        await asyncio.sleep(0.3)
        assert h.phases(uid)[-1] == JobPhase.RUNNING
        assert len(await backend.job_pod_names(uid)) == 2
        assert h.phases(done)[-1] == JobPhase.SUCCEEDED
