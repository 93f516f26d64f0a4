"""A worker with a gang scheduler, on a sim backend that records its calls: the PodGroup is made
before the job's first pod, deleted when the job finishes or is suspended, made again before a
resumed job's pods, and a job whose group the cluster refuses fails without a pod."""

from __future__ import annotations

from schemas.events import EventType
from schemas.status import JobPhase
from tests.workers.test_worker_runtime import jax, running, sim
from workers.backends.base import BackendError
from workers.backends.sim import SimBackend
from workers.gang_scheduling import GangScheduling, PodGroupPlan
from workers.rendering import PodPlan

GANG = GangScheduling("scheduler-plugins", "scheduler-plugins-scheduler")


class Refused(BackendError):
    """The cluster has no PodGroup CRD."""


def recording(backend: SimBackend, calls: list[str], *, refuse: bool = False) -> SimBackend:
    """`backend`, its gang scheduling on and its calls noted in order."""
    create_pod = backend.create_pod

    async def create_pod_group(job_uid: str, group: PodGroupPlan) -> None:
        calls.append(f"group {group.name} minMember={group.min_member}")
        if refuse:
            raise Refused("the server could not find the requested resource (podgroups)")

    async def delete_pod_group(job_uid: str, group: PodGroupPlan) -> None:
        calls.append(f"delete group {group.name}")

    async def create(job_uid: str, pod: PodPlan) -> None:
        calls.append(f"pod {pod.name} {pod.spec.model_extra}")
        await create_pod(job_uid, pod)

    backend.gang_scheduling = GANG
    backend.create_pod_group = create_pod_group  # type: ignore[method-assign]
    backend.delete_pod_group = delete_pod_group  # type: ignore[method-assign]
    backend.create_pod = create  # type: ignore[method-assign]
    return backend


async def test_the_group_comes_before_the_pods_and_goes_when_the_job_finishes() -> None:
    calls: list[str] = []
    async with running(recording(sim(), calls)) as h:
        uid = await h.assign(jax("gang", workers=2, duration="0.3s"))
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        await h.until(lambda: calls[-1] == "delete group gang")
    assert calls[0] == "group gang minMember=2"
    pods = calls[1:3]
    assert all("'schedulerName': 'scheduler-plugins-scheduler'" in pod for pod in pods), pods
    assert calls[3:] == ["delete group gang"]


async def test_suspend_deletes_the_group_and_resume_makes_it_again_first() -> None:
    calls: list[str] = []
    async with running(recording(sim(), calls)) as h:
        uid = await h.assign(jax("pause", workers=2, duration="30s"))
        await h.until_phase(uid, JobPhase.RUNNING)
        await h.request(EventType.JOB_SUSPENDED, uid)
        await h.until_phase(uid, JobPhase.SUSPENDED)
        assert calls[-1] == "delete group pause"
        await h.request(EventType.JOB_RESUMED, uid)
        await h.until(lambda: len([c for c in calls if c.startswith("pod ")]) == 4)
    made = [c.split()[0] for c in calls]
    assert made == ["group", "pod", "pod", "delete", "group", "pod", "pod"]


async def test_a_refused_group_fails_the_job_before_any_pod() -> None:
    calls: list[str] = []
    async with running(recording(sim(), calls, refuse=True)) as h:
        uid = await h.assign(jax("nocrd", workers=2))
        await h.until_phase(uid, JobPhase.FAILED)
        assert "podgroups" in (h.updates(uid)[-1].message or "")
    assert calls == ["group nocrd minMember=2"]
