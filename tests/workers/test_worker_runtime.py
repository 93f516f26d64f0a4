"""A worker on the sim backend fed straight through its assignments topic: deadlines that fire
on time, TTL, suspend and resume, the scheduler's word, refused objects, graceful stop."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from bus.events import publish_event
from bus.memory import MemoryBus
from bus.topics import Topics
from schemas.cluster import ClusterSnapshot
from schemas.codec import decode_event
from schemas.events import (
    EventType,
    JobAssigned,
    JobRef,
    JobRevoked,
    JobStatusUpdate,
    make_event,
)
from schemas.job_parsing import job_uid_of
from schemas.status import JobPhase
from tests.workers.job_documents import job_document, replica
from workers.backends.base import Backend, BackendError
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.rendering import ConfigMapPlan, PodPlan, ServicePlan
from workers.worker import Worker, WorkerConfig

CLUSTER = "c"


@dataclass
class Harness:
    bus: MemoryBus
    topics: Topics
    worker: Worker
    registry: CollectorRegistry

    async def assign(self, document: dict[str, Any], attempt: int = 1) -> str:
        uid = job_uid_of(document)
        assert uid is not None
        data = JobAssigned(uid=uid, cluster=CLUSTER, attempt=attempt, job=document)
        await self._send(make_event(EventType.JOB_ASSIGNED, "test/hub", uid, data), uid)
        return uid

    async def request(self, event_type: str, uid: str) -> None:
        await self._send(make_event(event_type, "test/hub", uid, JobRef(uid=uid)), uid)

    async def revoke(self, uid: str, attempt: int = 1) -> None:
        """What the hub sends when it moves the job to another cluster."""
        data = JobRevoked(uid=uid, cluster=CLUSTER, attempt=attempt, reason="cluster c lost")
        await self._send(make_event(EventType.JOB_REVOKED, "test/hub", uid, data), uid)

    async def _send(self, event: Any, uid: str) -> None:
        await publish_event(self.bus, self.topics.assignments(CLUSTER), uid, event)

    def updates(self, uid: str) -> list[JobStatusUpdate]:
        found = []
        for record in self.bus.records(self.topics.reports(CLUSTER)):
            event = decode_event(record.headers, record.value)
            if event.type == EventType.JOB_STATUS:
                update = event.data_as(JobStatusUpdate)
                if update.uid == uid:
                    found.append(update)
        return found

    def phases(self, uid: str) -> list[JobPhase]:
        return [u.phase for u in self.updates(uid)]

    def heartbeats(self) -> list[ClusterSnapshot]:
        """The worker's heartbeats so far, oldest first."""
        return [
            ClusterSnapshot.model_validate(event.data)
            for event in (
                decode_event(r.headers, r.value)
                for r in self.bus.records(self.topics.reports(CLUSTER))
            )
            if event.type == EventType.CLUSTER_HEARTBEAT
        ]

    async def until(self, check: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while True:
                if check():
                    return
                await asyncio.sleep(0.02)

    async def until_phase(self, uid: str, phase: JobPhase, timeout: float = 10.0) -> None:
        await self.until(lambda: phase in self.phases(uid), timeout)

    def committed(self) -> int:
        group = f"{self.topics.prefix}-worker-{CLUSTER}"
        return sum(self.bus.committed(group).values())


@asynccontextmanager
async def running(backend: Backend, config: WorkerConfig | None = None) -> AsyncIterator[Harness]:
    bus, topics, registry = MemoryBus(), Topics(), CollectorRegistry()
    await bus.start()
    config = config or WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.2)
    worker = Worker(bus, backend, config, topics, registry=registry)
    await worker.start()
    try:
        yield Harness(bus, topics, worker, registry)
    finally:
        await worker.stop()
        await bus.close()


def sim(capacity: str = "cpu=4,memory=8Gi") -> SimBackend:
    return SimBackend(parse_cluster_spec(f"{CLUSTER}:{capacity}").pool())


def jax(name: str, workers: int = 2, **kwargs: Any) -> dict[str, Any]:
    run_policy = kwargs.pop("run_policy", None)
    return job_document(
        "JAXJob", name, {"Worker": replica(workers, **kwargs)}, run_policy=run_policy
    )


# -- activeDeadlineSeconds ------------------------------------------------------------------


async def test_active_deadline_fires_on_time_and_stops_the_pods() -> None:
    backend = sim()
    async with running(backend) as h:
        started = time.monotonic()
        uid = await h.assign(jax("late", duration="30s", run_policy={"activeDeadlineSeconds": 1}))
        await h.until_phase(uid, JobPhase.FAILED, timeout=5)
        elapsed = time.monotonic() - started
        assert 0.9 <= elapsed < 3.0, elapsed
        final = h.updates(uid)[-1]
        assert final.reason == "JAXJobFailed"
        assert final.message == (
            "Job late has failed because it was active longer than specified deadline"
        )
        assert final.status is not None and final.status.completionTime is not None
        assert await backend.job_uids() == set()  # running pods stop, cleanPodPolicy or not
        assert h.worker.runs[uid].phase == JobPhase.FAILED


async def test_deadline_timer_goes_when_the_job_finishes_first() -> None:
    async with running(sim()) as h:
        uid = await h.assign(jax("quick", duration="0.1s", run_policy={"activeDeadlineSeconds": 1}))
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        assert h.worker._timers.armed == {}
        await asyncio.sleep(1.2)
        assert h.phases(uid)[-1] == JobPhase.SUCCEEDED


async def test_resume_restarts_the_deadline_from_the_new_start_time() -> None:
    async with running(sim()) as h:
        policy = {"activeDeadlineSeconds": 2}
        uid = await h.assign(jax("paused", duration="30s", run_policy=policy))
        await h.until_phase(uid, JobPhase.RUNNING)
        await asyncio.sleep(1.0)
        await h.request(EventType.JOB_SUSPENDED, uid)
        await h.until_phase(uid, JobPhase.SUSPENDED)
        await asyncio.sleep(1.5)  # past the first deadline: suspended, nothing fires
        assert JobPhase.FAILED not in h.phases(uid)
        resumed = time.monotonic()
        await h.request(EventType.JOB_RESUMED, uid)
        await h.until_phase(uid, JobPhase.FAILED, timeout=5)
        assert 1.8 <= time.monotonic() - resumed < 4.0
        final = h.updates(uid)[-1]
        assert final.reason == "JAXJobFailed"
        assert "active longer than specified deadline" in (final.message or "")


# -- ttlSecondsAfterFinished ----------------------------------------------------------------


async def test_ttl_deletes_the_jobs_objects_and_forgets_the_run() -> None:
    backend = sim()
    async with running(backend) as h:
        uid = await h.assign(
            jax("brief", duration="0.1s", run_policy={"ttlSecondsAfterFinished": 1})
        )
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        finished_at = time.monotonic()
        assert uid in await backend.job_uids()  # cleanPodPolicy None keeps the pods
        published = len(h.updates(uid))
        await h.until(lambda: uid not in h.worker.runs, timeout=5)
        assert 0.8 <= time.monotonic() - finished_at < 3.0
        assert await backend.job_uids() == set()
        await asyncio.sleep(0.3)
        assert len(h.updates(uid)) == published  # nothing new: the hub keeps the final status


async def test_ttl_zero_deletes_at_once() -> None:
    backend = sim()
    async with running(backend) as h:
        policy = {"ttlSecondsAfterFinished": 0}
        uid = await h.assign(jax("gone", duration="0.1s", run_policy=policy))
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        await h.until(lambda: uid not in h.worker.runs, timeout=1)
        assert await backend.job_uids() == set()


# -- suspend and resume ---------------------------------------------------------------------


async def test_suspend_deletes_pods_and_resume_runs_them_again() -> None:
    backend = sim("cpu=2,memory=8Gi")
    async with running(backend) as h:
        uid = await h.assign(jax("pause", workers=2, cpu="1", duration="1s"))
        await h.until_phase(uid, JobPhase.RUNNING)
        first_start = h.updates(uid)[-1].status.startTime  # type: ignore[union-attr]
        await h.request(EventType.JOB_SUSPENDED, uid)
        await h.until_phase(uid, JobPhase.SUSPENDED)
        suspended = h.updates(uid)[-1]
        assert suspended.reason == "JAXJobSuspended"
        assert suspended.status is not None
        assert suspended.status.replicaStatuses["Worker"].active == 0
        running_condition = suspended.status.condition("Running")
        assert running_condition is not None and running_condition.status == "False"
        assert await backend.job_uids() == set()
        snapshot = await h.worker.heartbeat()
        assert snapshot.free("cpu") == 2  # the capacity is free while suspended
        await asyncio.sleep(1.2)  # the pods would have finished by now: they are gone
        assert h.phases(uid)[-1] == JobPhase.SUSPENDED

        await h.request(EventType.JOB_RESUMED, uid)
        await h.until_phase(uid, JobPhase.SUCCEEDED, timeout=10)
        updates = h.updates(uid)
        resumed = next(u for u in updates if u.reason == "JAXJobResumed")
        assert resumed.phase == JobPhase.CREATED
        after = [u.phase for u in updates[updates.index(resumed) :]]
        assert after == [JobPhase.CREATED, JobPhase.RUNNING, JobPhase.SUCCEEDED]
        final = updates[-1].status
        assert final is not None and final.startTime is not None and first_start is not None
        assert final.startTime > first_start
        assert final.replicaStatuses["Worker"].succeeded == 2
        suspended_condition = final.condition("Suspended")
        assert suspended_condition is not None and suspended_condition.status == "False"


async def test_a_job_assigned_suspended_waits_for_resume() -> None:
    backend = sim()
    async with running(backend) as h:
        uid = await h.assign(jax("held", duration="0.1s", run_policy={"suspend": True}))
        await h.until_phase(uid, JobPhase.SUSPENDED)
        assert h.phases(uid) == [JobPhase.CREATED, JobPhase.SUSPENDED]
        await asyncio.sleep(0.3)
        assert await backend.job_uids() == set()
        await h.request(EventType.JOB_RESUMED, uid)
        await h.until_phase(uid, JobPhase.SUCCEEDED)


async def test_suspend_and_resume_for_unknown_jobs_are_committed_past() -> None:
    async with running(sim()) as h:
        await h.request(EventType.JOB_SUSPENDED, "nobody")
        await h.request(EventType.JOB_RESUMED, "nobody")
        await h.until(lambda: h.committed() == 2)
        assert h.worker.crashed is not None and not h.worker.crashed.done()


# -- the scheduler's word -------------------------------------------------------------------


async def test_unschedulable_pods_are_reported_once_with_the_schedulers_message() -> None:
    async with running(sim("cpu=1,memory=8Gi")) as h:
        uid = await h.assign(jax("huge", workers=1, cpu="2"))
        await h.until(lambda: any(u.reason == "Unschedulable" for u in h.updates(uid)))
        await asyncio.sleep(0.5)  # heartbeats and other pods come and go: still one report
        told = [u for u in h.updates(uid) if u.reason == "Unschedulable"]
        assert len(told) == 1
        assert told[0].phase == JobPhase.CREATED
        assert told[0].message == "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."
        run = h.worker.runs[uid]
        assert run.pending_reason == told[0].message
        assert run.unschedulable_since is not None and run.unschedulable_since <= time.time()


# -- refused objects ------------------------------------------------------------------------


class Forbidden(BackendError):
    pass


class Unreachable(BackendError):
    transient = True


class RefusingSim(SimBackend):
    """Refuses to create the pods whose names end in `refuse` (the first `times` tries, or
    always)."""

    def __init__(self, refuse: str, error: type[BackendError], times: int | None = None) -> None:
        super().__init__(parse_cluster_spec(f"{CLUSTER}:cpu=4,memory=8Gi").pool())
        self.refuse = refuse
        self.error = error
        self.times = times
        self.refusals = 0

    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        if pod.name.endswith(self.refuse) and (self.times is None or self.refusals < self.times):
            self.refusals += 1
            raise self.error(f'pods "{pod.name}" is forbidden: User "w" cannot create pods')
        await super().create_pod(job_uid, pod)


async def test_a_refused_pod_fails_the_job_and_the_worker_goes_on() -> None:
    backend = RefusingSim("-1", Forbidden)
    async with running(backend) as h:
        uid = await h.assign(jax("refused", workers=2, duration="5s"))
        await h.until_phase(uid, JobPhase.FAILED)
        final = h.updates(uid)[-1]
        assert final.reason == "JAXJobFailed"
        assert final.message is not None
        assert "cannot run on c" in final.message and "is forbidden" in final.message
        assert await backend.job_uids() == set()  # worker-0 was created, then deleted
        assert h.committed() == 1
        assert h.worker.crashed is not None and not h.worker.crashed.done()

        after = await h.assign(jax("after", workers=1, duration="0.1s"))
        await h.until_phase(after, JobPhase.SUCCEEDED)


async def test_a_transient_refusal_is_retried_and_the_assignment_committed_only_once_done() -> None:
    backend = RefusingSim("-0", Unreachable, times=5)
    async with running(backend) as h:
        uid = await h.assign(jax("later", workers=2, duration="0.3s"))
        await h.until(lambda: backend.refusals >= 2)
        assert backend.refusals < 5
        assert h.committed() == 0  # still in hand: a restart would get it again
        await h.until_phase(uid, JobPhase.SUCCEEDED, timeout=15)
        assert backend.refusals == 5
        await h.until(lambda: h.committed() == 1)  # the retry may still be in its backoff
        crashed = h.worker.crashed
        assert crashed is not None and not crashed.done()
        final = h.updates(uid)[-1].status
        assert final is not None and final.replicaStatuses["Worker"].succeeded == 2
        assert h.phases(uid).count(JobPhase.CREATED) == 1


async def test_a_worker_stopped_while_retrying_leaves_the_assignment_uncommitted() -> None:
    backend = RefusingSim("-0", Unreachable)
    async with running(backend) as h:
        await h.assign(jax("never", workers=1))
        await h.until(lambda: backend.refusals >= 2)
    assert h.committed() == 0
    crashed = h.worker.crashed
    assert crashed is not None and not crashed.done()


# -- the calls a backend sees ---------------------------------------------------------------


class RecordingSim(SimBackend):
    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(parse_cluster_spec(f"{CLUSTER}:cpu=8,memory=16Gi").pool())
        self.calls: list[tuple[str, str]] = []
        self.delay = delay

    async def create_config_map(self, job_uid: str, config_map: ConfigMapPlan) -> None:
        self.calls.append(("config_map", config_map.name))

    async def create_service(self, job_uid: str, service: ServicePlan) -> None:
        self.calls.append(("service", service.name))
        await super().create_service(job_uid, service)

    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        self.calls.append(("pod", pod.name))
        await asyncio.sleep(self.delay)
        await super().create_pod(job_uid, pod)

    async def delete_pod(self, job_uid: str, name: str, namespace: str) -> None:
        self.calls.append(("delete", name))
        await super().delete_pod(job_uid, name, namespace)


async def test_config_maps_come_before_the_pods() -> None:
    backend = RecordingSim()
    async with running(backend) as h:
        document = job_document(
            "MPIJob", "mpi", {"Launcher": replica(1, duration="0.1s"), "Worker": replica(2)}
        )
        uid = await h.assign(document)
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        assert backend.calls[:4] == [
            ("config_map", "mpi-config"),
            ("pod", "mpi-launcher"),
            ("pod", "mpi-worker-0"),
            ("pod", "mpi-worker-1"),
        ]


async def test_a_restarted_pod_gets_its_service_back_under_the_same_name() -> None:
    backend = RecordingSim()
    async with running(backend) as h:
        document = job_document(
            "PyTorchJob",
            "torch",
            {
                "Master": replica(1, duration="5s"),
                "Worker": replica(1, restart_policy="ExitCode", exit_code=137, duration="0.1s"),
            },
            run_policy={"backoffLimit": 1},
        )
        uid = await h.assign(document)
        await h.until_phase(uid, JobPhase.FAILED)
        worker = [c for c in backend.calls if c[1] == "torch-worker-0"]
        assert worker == [
            ("service", "torch-worker-0"),
            ("pod", "torch-worker-0"),
            ("delete", "torch-worker-0"),  # the restart: deleted, then made again
            ("service", "torch-worker-0"),
            ("pod", "torch-worker-0"),
        ]  # it failed again: kept for its logs (cleanPodPolicy None)
        # The backoff limit stops the job: the master, still running, goes.
        assert backend.calls[-1] == ("delete", "torch-master-0")
        final = h.updates(uid)[-1]
        assert final.reason == "PyTorchJobFailed"
        assert "reached the specified backoff limit (1)" in (final.message or "")
        restarts = h.registry.get_sample_value(
            "trainhub_worker_pod_restarts_total", {"cluster": CLUSTER}
        )
        assert restarts == 1


@pytest.mark.parametrize("restart_policy", ["OnFailure", "Always", "ExitCode"])
async def test_every_restart_policy_counts_against_the_backoff_limit(restart_policy: str) -> None:
    async with running(sim()) as h:
        document = jax(
            f"retry-{restart_policy.lower()}",
            workers=1,
            restart_policy=restart_policy,
            exit_code=137,
            duration="0.05s",
            run_policy={"backoffLimit": 3},
        )
        uid = await h.assign(document)
        await h.until_phase(uid, JobPhase.FAILED)
        assert h.phases(uid).count(JobPhase.RESTARTING) == 3
        assert h.worker.runs[uid].restarts == 4


class SlowCreatesSim(SimBackend):
    """Pod creates that take `delay` each, noting how many jobs have one in flight at once."""

    def __init__(self, delay: float) -> None:
        super().__init__(parse_cluster_spec(f"{CLUSTER}:cpu=8,memory=16Gi").pool())
        self.delay = delay
        self.in_flight: Counter[str] = Counter()
        self.most_jobs = 0

    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        self.in_flight[job_uid] += 1
        self.most_jobs = max(self.most_jobs, len(+self.in_flight))
        try:
            await asyncio.sleep(self.delay)
            await super().create_pod(job_uid, pod)
        finally:
            self.in_flight[job_uid] -= 1


async def test_different_jobs_are_created_at_once() -> None:
    backend = SlowCreatesSim(delay=0.5)
    async with running(backend) as h:
        await h.bus.create_topics([h.topics.assignment_spec(CLUSTER)])
        jobs = [jax(f"job{i}", workers=2, duration="0.1s") for i in range(3)]
        # All three in one batch of the assignments topic (nothing polls in between).
        uids = await asyncio.gather(*(h.assign(job) for job in jobs))
        for uid in uids:
            await h.until_phase(uid, JobPhase.SUCCEEDED)
        assert backend.most_jobs == 3
        await h.until(lambda: h.committed() == 3)
        for uid in uids:
            assert h.phases(uid) == [JobPhase.CREATED, JobPhase.RUNNING, JobPhase.SUCCEEDED]


async def test_one_jobs_events_stay_in_order_while_others_go_on() -> None:
    backend = RecordingSim(delay=0.2)
    async with running(backend) as h:
        slow = await h.assign(jax("slow", workers=2, duration="30s"))
        await h.request(EventType.JOB_SUSPENDED, slow)
        other = await h.assign(jax("other", workers=1, duration="0.1s"))
        await h.until_phase(slow, JobPhase.SUSPENDED)
        await h.until_phase(other, JobPhase.SUCCEEDED)
        # The suspension came after the creates of its job, never in between; the other
        # job did not wait for either.
        mine = [c[0] for c in backend.calls if c[1].startswith("slow-")]
        assert sorted(mine[:4]) == ["pod", "pod", "service", "service"]
        assert mine[4:] == ["delete", "delete"]
        first_delete = backend.calls.index(("delete", "slow-worker-0"))
        assert backend.calls.index(("pod", "other-worker-0")) < first_delete
        assert await backend.job_uids() == {other}


class StaggeredSim(SimBackend):
    """Each pod's create takes as long as `delays` says for its name (default none)."""

    def __init__(self, delays: dict[str, float]) -> None:
        super().__init__(parse_cluster_spec(f"{CLUSTER}:cpu=8,memory=16Gi").pool())
        self.delays = delays
        self.created: list[str] = []

    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        await asyncio.sleep(self.delays.get(pod.name, 0.0))
        await super().create_pod(job_uid, pod)
        self.created.append(pod.name)


async def test_a_job_still_creating_holds_up_only_its_own_observations() -> None:
    backend = StaggeredSim({"slow-worker-0": 0.1, "slow-worker-1": 3.0})
    async with running(backend) as h:
        await h.bus.create_topics([h.topics.assignment_spec(CLUSTER)])
        # One batch (nothing polls in between): the two jobs are created at once.
        slow, quick = await asyncio.gather(
            h.assign(jax("slow", workers=2, duration="0.1s")),
            h.assign(jax("quick", workers=1, duration="0.1s")),
        )
        # slow-worker-0 runs and ends while its job still holds its lock (creating worker-1);
        # its observations wait for that, quick's do not.
        await h.until_phase(quick, JobPhase.SUCCEEDED, timeout=2.5)
        assert "slow-worker-0" in backend.created
        assert "slow-worker-1" not in backend.created
        assert JobPhase.SUCCEEDED not in h.phases(slow)
        await h.until_phase(slow, JobPhase.SUCCEEDED, timeout=10)


async def test_freed_room_is_reported_at_once_not_at_the_next_heartbeat() -> None:
    backend = sim("cpu=2,memory=8Gi")
    async with running(backend, WorkerConfig(cluster=CLUSTER, heartbeat_interval=30)) as h:
        uid = await h.assign(jax("brief", workers=2, cpu="1", duration="0.3s"))
        await h.until_phase(uid, JobPhase.RUNNING)
        await h.until_phase(uid, JobPhase.SUCCEEDED)
        # One report asked for by the finish (the first heartbeat came at start).
        await h.until(lambda: len(h.heartbeats()) == 2, timeout=2)
        assert h.heartbeats()[-1].free("cpu") == 2
        await asyncio.sleep(0.3)
        assert len(h.heartbeats()) == 2


async def test_stop_lets_the_assignment_in_hand_finish_and_commit() -> None:
    backend = RecordingSim(delay=0.3)
    bus, topics = MemoryBus(), Topics()
    await bus.start()
    worker = Worker(bus, backend, WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.2), topics)
    await worker.start()
    h = Harness(bus, topics, worker, CollectorRegistry())
    try:
        await h.assign(jax("slow", workers=3, duration="10s"))
        await h.until(lambda: ("pod", "slow-worker-0") in backend.calls)
        await worker.stop()
        assert [c for c in backend.calls if c[0] == "pod"] == [
            ("pod", "slow-worker-0"),
            ("pod", "slow-worker-1"),
            ("pod", "slow-worker-2"),
        ]
        assert h.committed() == 1
    finally:
        await bus.close()


async def test_heartbeats_name_the_reporting_process() -> None:
    # The hub tells a restart (a new instance for good) from two workers sharing a name.
    async with running(sim()) as first:
        await first.until(lambda: len(first.heartbeats()) >= 2)
        instances = {s.instance for s in first.heartbeats()}
    async with running(sim()) as second:
        await second.until(lambda: len(second.heartbeats()) >= 1)
        restarted = second.heartbeats()[0].instance
    assert len(instances) == 1 and None not in instances
    assert restarted is not None and restarted not in instances


async def test_a_restarted_worker_starts_nothing_the_hub_revoked_or_replaced_meanwhile() -> None:
    """Assignments read past the committed offset after a restart: one the hub revoked, and
    one it replaced with a newer attempt, while the worker was away. Creating their pods only
    to delete them next ran a local job's commands for nothing."""
    async with running(sim()) as harness:
        pass  # a worker that ran once and committed its (empty) topic, then stopped
    bus, topics = harness.bus, harness.topics
    await bus.start()  # the same topics and committed offsets, as a broker keeps them
    revoked = await harness.assign(jax("revoked", workers=1))
    await harness.revoke(revoked)
    replaced = await harness.assign(jax("replaced", workers=1))
    await harness.assign(jax("replaced", workers=1), attempt=2)
    worker = Worker(bus, sim(), WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.2), topics)
    await worker.start()
    try:
        await harness.until(lambda: any(u.attempt == 2 for u in harness.updates(replaced)))
        await bus.flush()
        assert harness.updates(revoked) == []
        assert {u.attempt for u in harness.updates(replaced)} == {2}
    finally:
        await worker.stop()
        await bus.close()


class StalledBus(MemoryBus):
    """A bus whose broker went away: once `stalled`, a publish never returns (as aiokafka
    holds a send until the partition's earlier, undeliverable batch drains)."""

    stalled = False

    async def publish(self, *args: Any, **kwargs: Any) -> Any:
        if self.stalled:
            await asyncio.Event().wait()
        return await super().publish(*args, **kwargs)


async def test_stop_ends_promptly_when_the_bus_takes_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The stop reports and hand-backs are best effort: the hub learns of a silent cluster
    # from its missing heartbeats. Seen on a real broker: a SIGTERMed worker hung in its
    # stop report until Kubernetes' grace ran out.
    from workers import capacity_reports
    from workers import worker as worker_module

    monkeypatch.setattr(capacity_reports, "_STOP_REPORT_S", 0.3)
    monkeypatch.setattr(worker_module, "_HAND_BACK_GRACE", 0.5)
    backend = sim()
    bus, topics = StalledBus(), Topics()
    await bus.start()
    worker = Worker(bus, backend, WorkerConfig(cluster=CLUSTER, heartbeat_interval=0.2), topics)
    await worker.start()
    h = Harness(bus, topics, worker, CollectorRegistry())
    try:
        uid = await h.assign(jax("held", workers=1, duration="60s"))
        await h.until(lambda: uid in worker.runs)
        bus.stalled = True
        started = time.monotonic()
        await asyncio.wait_for(worker.stop(), 10)
        assert time.monotonic() - started < 3
        assert not worker.runs  # its pods were deleted, though the hand-back never went out
    finally:
        await bus.close()
