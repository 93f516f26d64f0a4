"""A worker whose cluster API goes away (every call refused, or every call hanging) and comes
back: heartbeats pause instead of reporting stale capacity, work in hand is retried instead of
ending the worker, and the first heartbeat after the outage comes only once the jobs the hub
moved away meanwhile are deleted. Refusals for good still surface."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from bus.memory import MemoryBus
from bus.topics import Topics
from schemas.status import JobPhase
from tests.workers.job_documents import job_document, replica
from tests.workers.test_worker_runtime import CLUSTER, Harness, jax, running
from workers.backends.base import BackendError, Capacity
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.rendering import PodPlan, ServicePlan
from workers.worker import Worker, WorkerConfig


class Unreachable(BackendError):
    transient = True


class Denied(BackendError):
    """Like a 403: the identity may not do this."""


class OutageSim(SimBackend):
    """A sim cluster whose API can be down (every call refused at once, transiently), frozen
    (every call hangs until thawed), or refuse the next few calls of one kind. Its pods run on
    regardless, as a real cluster's do while its apiserver is away."""

    def __init__(self, capacity: str = "cpu=8,memory=16Gi") -> None:
        super().__init__(parse_cluster_spec(f"{CLUSTER}:{capacity}").pool())
        self.down = False
        self.refuse: Counter[str] = Counter()
        """Call name -> how many of its next calls to refuse."""
        self.refused: Counter[str] = Counter()
        self.denied: set[str] = set()
        """Call names refused for good."""
        self._thawed = asyncio.Event()
        self._thawed.set()

    def freeze(self) -> None:
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    async def _call(self, name: str) -> None:
        await self._thawed.wait()
        if name in self.denied:
            raise Denied(f"{name}: forbidden")
        if self.down or self.refuse[name] > 0:
            self.refuse[name] = max(0, self.refuse[name] - 1)
            self.refused[name] += 1
            raise Unreachable(f"{name}: connection refused")

    async def capacity(self) -> Capacity:
        await self._call("capacity")
        return await super().capacity()

    async def job_uids(self) -> set[str]:
        await self._call("job_uids")
        return await super().job_uids()

    async def delete_job(self, job_uid: str, namespace: str | None = None) -> None:
        await self._call("delete_job")
        await super().delete_job(job_uid, namespace)

    async def create_service(self, job_uid: str, service: ServicePlan) -> None:
        await self._call("create_service")
        await super().create_service(job_uid, service)

    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        await self._call("create_pod")
        await super().create_pod(job_uid, pod)

    async def delete_pod(self, job_uid: str, name: str, namespace: str) -> None:
        await self._call("delete_pod")
        await super().delete_pod(job_uid, name, namespace)

    def objects(self) -> set[str]:
        """The jobs with pods in the cluster, as its admin sees them (no outage applies)."""
        return {pod.job_uid for pod in self._pods.values()}


def fast(overdue_after: float = 0.6) -> WorkerConfig:
    return WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.1, overdue_after=overdue_after)


def alive(h: Harness) -> bool:
    crashed = h.worker.crashed
    return crashed is not None and not crashed.done()


async def _two_running_jobs(h: Harness) -> tuple[str, str]:
    moved = await h.assign(jax("moved", workers=2, cpu="1", duration="60s"))
    stays = await h.assign(jax("stays", workers=1, cpu="1", duration="60s"))
    await h.until_phase(moved, JobPhase.RUNNING)
    await h.until_phase(stays, JobPhase.RUNNING)
    await h.until(lambda: {moved, stays} <= set(h.heartbeats()[-1].jobs))
    return moved, stays


# -- the first heartbeat after an outage ----------------------------------------------------


async def test_after_a_frozen_api_the_first_heartbeat_waits_for_the_moved_jobs_to_go() -> None:
    backend = OutageSim()
    async with running(backend, fast()) as h:
        moved, stays = await _two_running_jobs(h)
        backend.freeze()
        await asyncio.sleep(0.3)  # the heartbeat's capacity read hangs
        before = len(h.heartbeats())
        # The hub lost the cluster and placed the job elsewhere: the revocation waits too.
        await h.revoke(moved)
        await asyncio.sleep(0.8)
        assert len(h.heartbeats()) == before  # nothing reported while frozen
        backend.thaw()
        await h.until(lambda: len(h.heartbeats()) > before)
        first = h.heartbeats()[before]
        assert moved not in first.jobs, first.jobs
        assert stays in first.jobs
        assert backend.objects() == {stays}
        assert set(h.worker.runs) == {stays}
        await h.until(lambda: h.committed() == 3)
        assert alive(h)


async def test_after_an_unreachable_api_the_worker_reports_again_once_the_moved_jobs_are_gone() -> (
    None
):
    backend = OutageSim()
    async with running(backend, fast()) as h:
        moved, stays = await _two_running_jobs(h)
        backend.down = True
        await asyncio.sleep(0.3)
        before = len(h.heartbeats())
        await h.revoke(moved)
        await h.until(lambda: backend.refused["delete_job"] >= 2)  # retried, not given up
        await asyncio.sleep(0.3)
        assert alive(h)
        assert len(h.heartbeats()) == before  # silence: the hub marks the cluster lost
        assert h.committed() == 2  # the revocation is not carried out yet
        assert backend.objects() == {moved, stays}
        backend.down = False
        await h.until(lambda: len(h.heartbeats()) > before)
        first = h.heartbeats()[before]
        assert moved not in first.jobs and stays in first.jobs, first.jobs
        assert backend.objects() == {stays}
        await h.until(lambda: h.committed() == 3)
        assert alive(h)
        # Business as usual afterwards.
        after = await h.assign(jax("after", workers=1, duration="0.1s"))
        await h.until_phase(after, JobPhase.SUCCEEDED)
        assert h.updates(stays)[-1].phase == JobPhase.RUNNING


async def test_a_heartbeat_refused_for_good_still_stops_the_worker() -> None:
    backend = OutageSim()
    async with running(backend, fast()) as h:
        backend.denied.add("capacity")
        crashed = h.worker.crashed
        assert crashed is not None
        error = await asyncio.wait_for(crashed, 5)
        assert isinstance(error, Denied) and "capacity: forbidden" in str(error)


async def test_a_revocation_the_cluster_refuses_for_good_is_said_and_the_worker_goes_on() -> None:
    # E.g. an identity bound to some namespaces, run without --namespace: dying on it
    # replayed the same revocation at every restart.
    backend = OutageSim()
    async with running(backend, fast()) as h:
        moved, stays = await _two_running_jobs(h)
        backend.denied.add("delete_job")
        await h.revoke(moved)
        await h.until(lambda: moved not in h.worker.runs)
        backend.denied.discard("delete_job")
        after = await h.assign(jax("after", workers=1, duration="0.1s"))
        await h.until_phase(after, JobPhase.SUCCEEDED)
        assert alive(h) and stays in h.worker.runs


# -- work in hand ---------------------------------------------------------------------------


async def test_a_suspension_interrupted_by_an_outage_still_deletes_the_pods() -> None:
    backend = OutageSim("cpu=2,memory=8Gi")
    async with running(backend, fast(overdue_after=5.0)) as h:
        uid = await h.assign(jax("pause", workers=2, cpu="1", duration="60s"))
        await h.until_phase(uid, JobPhase.RUNNING)
        backend.refuse["delete_pod"] = 3  # the first pod's delete, then twice more
        await h.request("io.trainhub.job.suspended", uid)
        await h.until_phase(uid, JobPhase.SUSPENDED)
        await h.until(lambda: h.committed() == 2, timeout=15)
        assert backend.refused["delete_pod"] == 3
        assert backend.objects() == set()
        snapshot = await h.worker.heartbeat()
        assert snapshot.free("cpu") == 2
        assert alive(h)


async def test_a_pod_restart_interrupted_by_an_outage_is_caught_up() -> None:
    """No event retries a decision made on a pod observation: the catch-up loop does."""
    backend = OutageSim()
    async with running(backend, fast(overdue_after=5.0)) as h:
        document = job_document(
            "PyTorchJob",
            "torch",
            {
                "Master": replica(1, duration="30s"),
                "Worker": replica(1, restart_policy="OnFailure", exit_code=1, duration="0.3s"),
            },
            run_policy={"backoffLimit": 1},
        )
        uid = await h.assign(document)
        await h.until_phase(uid, JobPhase.RUNNING)
        backend.refuse["create_pod"] = 3  # the worker's re-creation, three times
        await h.until_phase(uid, JobPhase.FAILED, timeout=15)
        assert backend.refused["create_pod"] == 3
        final = h.updates(uid)[-1]
        assert "reached the specified backoff limit (1)" in (final.message or "")
        restarts = h.registry.get_sample_value(
            "trainhub_worker_pod_restarts_total", {"cluster": CLUSTER}
        )
        assert restarts == 1
        assert alive(h)


# -- adoption -------------------------------------------------------------------------------


class KeptSim(OutageSim):
    keeps_pods = True


async def _restart_after_revoking(
    backend: KeptSim, meanwhile: Callable[[], None]
) -> tuple[Harness, str, str]:
    """A first worker runs two jobs and goes; the hub revokes one of them and `meanwhile`
    happens to the cluster; a second worker starts on the same cluster and topics."""
    bus, topics, registry = MemoryBus(), Topics(), CollectorRegistry()
    await bus.start()
    first = Worker(bus, backend, fast(overdue_after=5.0), topics, registry=registry)
    await first.start()
    h = Harness(bus, topics, first, registry)
    moved, kept = await _two_running_jobs(h)
    await first.stop()
    await h.revoke(moved)
    meanwhile()
    second = Worker(bus, backend, fast(overdue_after=5.0), topics, registry=CollectorRegistry())
    h = Harness(bus, topics, second, registry)
    try:
        await second.start()
    except BaseException:
        await bus.close()
        raise
    return h, moved, kept


async def test_adoption_tries_again_after_a_transient_refusal() -> None:
    backend = KeptSim()

    def refuse_twice() -> None:
        backend.refuse["job_uids"] = 2

    h, moved, kept = await _restart_after_revoking(backend, refuse_twice)
    try:
        assert backend.refused["job_uids"] == 2
        assert backend.objects() == {kept}  # the revoked job's pods did not leak
        assert moved not in h.worker.runs
        assert set(h.worker.runs) == {kept}
        assert alive(h)
    finally:
        await h.worker.stop()
        await h.bus.close()


async def test_adoption_is_skipped_when_the_cluster_refuses_the_listing_for_good() -> None:
    backend = KeptSim()

    def deny() -> None:
        backend.denied.add("job_uids")

    h, moved, kept = await _restart_after_revoking(backend, deny)
    try:
        assert h.worker.runs == {}
        assert backend.objects() == {moved, kept}  # nothing known, nothing deleted
        assert alive(h)
    finally:
        await h.worker.stop()
        await h.bus.close()
