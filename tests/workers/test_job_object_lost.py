"""A worker told news of a job's own object (direct mode on a cluster with the Kubeflow
CRDs): deleted by someone else, the running job fails and its pods go; suspended or resumed
there, the job follows; another attempt's object, or a job that ended already, changes
nothing. On the sim backend, which never reports such news itself."""

from __future__ import annotations

import asyncio

from schemas.status import JobPhase
from tests.workers.test_worker_runtime import CLUSTER, jax, running, sim
from workers.backends.base import JobObjectLost, JobObjectSuspension


async def test_the_running_job_fails_and_its_pods_go() -> None:
    backend = sim()
    async with running(backend) as h:
        uid = await h.assign(jax("lost", duration="60s"))
        await h.until_phase(uid, JobPhase.RUNNING)
        await backend.job_object_news.put(JobObjectLost(uid, 1, "JAXJob lost"))
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
        await backend.job_object_news.put(JobObjectLost(uid, 7, "JAXJob kept"))
        done = await h.assign(jax("done", duration="0.05s"))
        await h.until_phase(done, JobPhase.SUCCEEDED)
        await backend.job_object_news.put(JobObjectLost(done, 1, "JAXJob done"))
        await asyncio.sleep(0.3)
        assert h.phases(uid)[-1] == JobPhase.RUNNING
        assert len(await backend.job_pod_names(uid)) == 2
        assert h.phases(done)[-1] == JobPhase.SUCCEEDED


async def test_a_suspend_set_on_the_object_suspends_the_job_and_unset_resumes_it() -> None:
    """`kubectl patch` of the object's runPolicy.suspend (told as a JobObjectSuspension):
    the pods go and Suspended is told, as a suspension through the hub; set back, the pods
    are made again and the job runs on. Another attempt's object changes nothing."""
    backend = sim()
    async with running(backend) as h:
        uid = await h.assign(jax("paused", duration="60s"))
        await h.until_phase(uid, JobPhase.RUNNING)
        await backend.job_object_news.put(JobObjectSuspension(uid, 7, True, "JAXJob paused"))
        await asyncio.sleep(0.3)
        assert h.phases(uid)[-1] == JobPhase.RUNNING
        await backend.job_object_news.put(JobObjectSuspension(uid, 1, True, "JAXJob paused"))
        await h.until_phase(uid, JobPhase.SUSPENDED)
        assert await backend.job_pod_names(uid) == []
        suspended = h.updates(uid)[-1]
        assert suspended.status is not None and suspended.status.is_true("Suspended")
        await backend.job_object_news.put(JobObjectSuspension(uid, 1, False, "JAXJob paused"))
        await h.until(
            lambda: h.phases(uid)[-1] == JobPhase.RUNNING and JobPhase.SUSPENDED in h.phases(uid)
        )
        assert len(await backend.job_pod_names(uid)) == 2
