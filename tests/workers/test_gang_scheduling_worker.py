"""A worker with a gang scheduler, on a sim backend that records its calls: the PodGroup is made
before the job's first pod, deleted when the job finishes or is suspended, made again before a
resumed job's pods, and a job whose group the cluster refuses fails without a pod; the job's own
object, where the cluster has one, comes before them all."""

from __future__ import annotations

from schemas.events import EventType
from schemas.kubeflow import AnyJob
from schemas.status import JobPhase, JobStatus
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


async def test_the_job_s_own_object_comes_before_its_group_and_pods_and_gets_each_status() -> None:
    """Where the cluster serves the job's kind (kube_job_object.py), its object is made first
    (so the others can be owned by it), and every status the run reaches is written into it."""
    calls: list[str] = []
    backend = recording(sim(), calls)

    async def ensure_job_object(job: AnyJob, attempt: int) -> None:
        calls.append(f"object {job.kind} {job.metadata.name} attempt={attempt}")

    async def write_job_status(job: AnyJob, status: JobStatus) -> None:
        # As the kube backend does, only what changed is written.
        said = f"status {[c.type for c in status.conditions if c.status == 'True']}"
        if said not in calls[-1:]:
            calls.append(said)

    backend.ensure_job_object = ensure_job_object  # type: ignore[method-assign]
    backend.write_job_status = write_job_status  # type: ignore[method-assign]
    async with running(backend) as h:
        uid = await h.assign(jax("owned", workers=2, duration="0.3s"))
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        await h.until(lambda: calls[-1] == "status ['Created', 'Succeeded']")
    assert calls[:4] == [
        "object JAXJob owned attempt=1",
        "group owned minMember=2",
        calls[2],
        calls[3],
    ]
    assert all(c.startswith("pod owned-worker-") for c in calls[2:4])
    statuses = [c for c in calls if c.startswith("status")]
    assert statuses[0] == "status ['Created']"
    assert "status ['Created', 'Running']" in statuses
    assert calls.count("object JAXJob owned attempt=1") == 1
