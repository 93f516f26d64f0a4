"""Fault injection on real parts: a member cluster loses its apiserver (killed, or frozen), or
its worker is killed with SIGKILL, while a burst of jobs runs there. The hub must re-dispatch
those jobs within its lost-cluster timeout plus one heartbeat; when the cluster comes back, its
worker deletes the pods of the moved jobs before it reports capacity again; every job ends
Succeeded exactly once, with its pods only on the cluster that finally ran it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from dispatcher.hub import HubConfig
from schemas.events import JobStatusUpdate
from schemas.status import JobPhase
from tests.helpers import jax_job
from tests.kube.helpers_e2e import Fleet, StatusLog, SupervisedWorker, pods_of, running_fleet
from tests.kube.sandbox_access import job_objects
from trainhub.producer import submit_document
from trainhub_sandbox.kube_cluster import (
    KubeSandbox,
    MemberCluster,
    load_state,
    pause_apiserver,
    resume_apiserver,
    start_apiserver,
    stop_apiserver,
)

pytestmark = [pytest.mark.kube, pytest.mark.kafka]

LOST_AFTER = 5.0
"""The hub's lost-cluster timeout (seconds without a heartbeat), short for the test."""
HEARTBEAT = 0.5
SCHEDULE = 0.5
"""How often the hub looks for lost clusters when nothing else wakes it."""
MARGIN = 1.0
"""Room for one hub pass and the Kafka round trips of the re-dispatch."""
VICTIM = "small"
OTHERS = ("large", "h100")
JOBS = 5
PODS_PER_JOB = 2
DURATION = "15s"
"""Long enough that every job still runs on the victim when the fault strikes."""


@dataclass(frozen=True)
class Fault:
    """One way for the victim cluster to go away, and how it comes back."""

    name: str
    inject: Callable[[KubeSandbox, SupervisedWorker], Awaitable[None]]
    outage: Callable[[SupervisedWorker], Awaitable[None]]
    """What the outage lasts for, once the hub has moved the jobs."""
    repair: Callable[[KubeSandbox, SupervisedWorker], Awaitable[None]]
    worker_exits: int = 0
    """How many times the victim's worker process ends on the way: the apiserver faults are
    ridden out in-process (heartbeats pause, revocations are retried with backoff); whichever
    way it returns, the worker deletes the moved jobs' objects before its first heartbeat."""


# The sandbox calls block (the restart until /readyz answers): in a thread, so that the hub
# and the other clusters' workers in this process keep heartbeating meanwhile.


async def _kill_apiserver(sandbox: KubeSandbox, worker: SupervisedWorker) -> None:
    await asyncio.to_thread(stop_apiserver, sandbox, VICTIM)


OUTLAST = 8.0
"""Seconds the killed apiserver stays away once the jobs have moved: well past one round of
the worker's API retries (~6 s), after which a transient error used to end its process."""


async def _worker_waits(worker: SupervisedWorker) -> None:
    """The worker keeps failing its API calls, and keeps running."""
    await asyncio.sleep(OUTLAST)
    assert worker.exits == [], worker.log()[-3000:]


async def _restart_apiserver(sandbox: KubeSandbox, worker: SupervisedWorker) -> None:
    member = await asyncio.to_thread(start_apiserver, sandbox, VICTIM)
    # The state file follows, so that `stop` finds the new process by its PID.
    assert load_state(sandbox.workdir).clusters[VICTIM].processes == member.processes


async def _pause_apiserver(sandbox: KubeSandbox, worker: SupervisedWorker) -> None:
    await asyncio.to_thread(pause_apiserver, sandbox, VICTIM)


async def _resume_apiserver(sandbox: KubeSandbox, worker: SupervisedWorker) -> None:
    await asyncio.to_thread(resume_apiserver, sandbox, VICTIM)


async def _kill_worker(sandbox: KubeSandbox, worker: SupervisedWorker) -> None:
    await asyncio.to_thread(worker.kill)


async def _release_worker(sandbox: KubeSandbox, worker: SupervisedWorker) -> None:
    worker.release()


async def _no_longer(worker: SupervisedWorker) -> None:
    """Repaired as soon as the jobs have moved: already past the timeout."""


FAULTS = [
    Fault("apiserver-killed", _kill_apiserver, _worker_waits, _restart_apiserver),
    # Shorter than the worker's request timeout: its calls hang, then answer.
    Fault("apiserver-paused", _pause_apiserver, _no_longer, _resume_apiserver),
    Fault("worker-killed", _kill_worker, _no_longer, _release_worker, worker_exits=1),
]


def _running_on(status: StatusLog, uid: str, cluster: str) -> bool:
    history = status.history(uid)
    return bool(history) and (history[-1].phase, history[-1].cluster) == (JobPhase.RUNNING, cluster)


def _is_second_placement(update: JobStatusUpdate) -> bool:
    return update.phase == JobPhase.ASSIGNED and update.attempt == 2


def _reassigned(status: StatusLog, uid: str) -> bool:
    return any(_is_second_placement(u) for u in status.history(uid))


async def _leftovers(cluster: MemberCluster, uids: list[str]) -> list[str]:
    """The jobs' pods and services that still exist on `cluster`, as the admin sees them."""
    found = []
    for uid in uids:
        for resource in ("pods", "services"):
            found += [
                f"{resource}/{obj['metadata']['name']}"
                for obj in await job_objects(cluster, resource, uid)
            ]
    return found


async def _burst_on_victim(fleet: Fleet, fault: Fault) -> list[str]:
    """Submit the burst while the victim is the only cluster the hub knows, and wait until
    every job runs there; then bring up the other clusters' workers."""
    uids = []
    for index in range(JOBS):
        document = jax_job(
            f"fi-{fault.name}-{index}",
            workers=PODS_PER_JOB,
            cpu="500m",
            memory="512Mi",
            duration=DURATION,
        )
        uids.append(await submit_document(fleet.bus, fleet.topics, document))
    status = fleet.status
    await status.wait(
        lambda: all(_running_on(status, u, VICTIM) for u in uids), 60, "the burst to run"
    )
    for uid in uids:
        pods = await pods_of(fleet.cluster(VICTIM), uid)
        assert [p["status"]["phase"] for p in pods] == ["Running"] * PODS_PER_JOB
    for name in OTHERS:
        await fleet.start_worker(name, heartbeat_interval=HEARTBEAT)
    await fleet.wait_registered(OTHERS)
    return uids


def _check_redispatch_time(fleet: Fleet, fault: Fault, uids: list[str], faulted: datetime) -> None:
    """Every job was placed again after the victim's last heartbeat plus the timeout (not
    sooner) and within the timeout plus one heartbeat of the fault."""
    status = fleet.status
    moved_at = [status.first(u, _is_second_placement).time for u in uids]
    last_beat = max(
        beat.observedAt
        for beat in fleet.heartbeats.of(VICTIM)
        if beat.observedAt is not None and beat.observedAt < min(moved_at)
    )
    since_fault = [(t - faulted).total_seconds() for t in moved_at]
    since_beat = [(t - last_beat).total_seconds() for t in moved_at]
    sys.stdout.write(
        f"{fault.name}: re-dispatched {min(since_fault):.2f}-{max(since_fault):.2f}s after "
        f"the fault, {min(since_beat):.2f}-{max(since_beat):.2f}s after the last heartbeat "
        f"(lost_after {LOST_AFTER}s, heartbeat {HEARTBEAT}s)\n"
    )
    assert min(since_beat) >= LOST_AFTER, since_beat
    assert max(since_fault) <= LOST_AFTER + HEARTBEAT + MARGIN, since_fault
    for uid in uids:
        redispatched = status.first(uid, lambda u: u.reason == "Redispatched").update
        assert redispatched.message is not None
        assert f"cluster {VICTIM} lost" in redispatched.message


async def _assert_succeeded_once_where_placed(fleet: Fleet, uid: str) -> str:
    """One Succeeded for the job, from the cluster of its second placement; nothing from the
    victim once it was re-dispatched; its pods exactly once on that cluster and nowhere else.
    Returns the cluster."""
    history = fleet.status.history(uid)
    succeeded = [u for u in history if u.phase == JobPhase.SUCCEEDED]
    assert len(succeeded) == 1, str(fleet.status)
    (final,) = succeeded
    placements = [u for u in history if u.phase == JobPhase.ASSIGNED]
    assert [u.attempt for u in placements] == [1, 2], str(fleet.status)
    assert placements[0].cluster == VICTIM
    second = placements[1]
    assert second.placement is not None and second.placement.chosen == second.cluster
    assert final.cluster == second.cluster != VICTIM and final.attempt == 2, str(fleet.status)
    moved = next(i for i, u in enumerate(history) if u.reason == "Redispatched")
    assert all(u.cluster != VICTIM for u in history[moved:]), str(fleet.status)

    cluster = fleet.cluster(final.cluster)
    pods = await pods_of(cluster, uid)
    names = sorted(p["metadata"]["name"] for p in pods)
    assert len(names) == PODS_PER_JOB == len(set(names)), names
    for pod in pods:
        assert pod["spec"]["nodeName"] in cluster.node_names
        assert pod["status"]["phase"] == "Succeeded"
    for other in fleet.sandbox.clusters.values():
        if other.name != cluster.name:
            assert await pods_of(other, uid) == [], f"{uid} has pods on {other.name}"
    record = fleet.hub.ledger.get(uid)
    assert record is not None and record.phase == JobPhase.SUCCEEDED
    assert (record.cluster, record.attempt) == (cluster.name, 2)
    return cluster.name


async def _probe_victim(fleet: Fleet) -> str:
    """A job only the victim's nodes can hold: it must run there, first time."""
    probe = jax_job(
        "fi-probe",
        workers=1,
        cpu="500m",
        memory="512Mi",
        duration="1s",
        node_selector={"kubernetes.io/hostname": f"{VICTIM}-node-0"},
    )
    uid = await submit_document(fleet.bus, fleet.topics, probe)
    await fleet.status.wait_finished([uid], timeout=60)
    final = fleet.status.last(uid)
    assert (final.phase, final.cluster, final.attempt) == (JobPhase.SUCCEEDED, VICTIM, 1)
    return uid


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_a_lost_clusters_jobs_run_elsewhere_exactly_once_and_leave_no_pods_behind(
    fault: Fault,
    fleet_sandbox: KubeSandbox,
    kafka_settings: KafkaSettings,
    topics: Topics,
    tmp_path: Path,
) -> None:
    config = HubConfig(
        max_heartbeat_age=LOST_AFTER, lost_after=LOST_AFTER, schedule_interval=SCHEDULE
    )
    async with running_fleet(
        kafka_settings, topics, fleet_sandbox, workers=(), config=config
    ) as fleet:
        status, victim_cluster = fleet.status, fleet.cluster(VICTIM)
        victim = SupervisedWorker(
            victim_cluster, kafka_settings, topics, tmp_path, heartbeat_interval=HEARTBEAT
        )
        uids: list[str] = []
        injected = repaired = False
        try:
            await victim.start()
            await fleet.wait_registered([VICTIM], timeout=60)
            uids += await _burst_on_victim(fleet, fault)

            faulted = datetime.now(UTC)
            await fault.inject(fleet_sandbox, victim)
            injected = True
            await status.wait(
                lambda: all(_reassigned(status, u) for u in uids),
                LOST_AFTER + 30,
                "the victim's jobs to be placed elsewhere",
            )
            _check_redispatch_time(fleet, fault, uids, faulted)
            await fault.outage(victim)
            # While away the victim reported nothing: no stale capacity.
            away = fleet.heartbeats.of(VICTIM, after=faulted + timedelta(seconds=HEARTBEAT))
            assert away == [], away

            back_from = datetime.now(UTC)
            await fault.repair(fleet_sandbox, victim)
            repaired = True
            await status.wait(
                lambda: bool(fleet.heartbeats.of(VICTIM, after=back_from)),
                90,
                "the victim's worker to report again",
            )
            first = fleet.heartbeats.of(VICTIM, after=back_from)[0]
            assert first.observedAt is not None
            sys.stdout.write(
                f"{fault.name}: the victim reported again "
                f"{(first.observedAt - back_from).total_seconds():.2f}s after the repair "
                f"(worker exits so far: {victim.exits})\n"
            )
            assert await _leftovers(victim_cluster, uids) == []
            assert not set(first.jobs) & set(uids), first
            assert all(n.requested.get("cpu", 0) == 0 for n in first.nodes), first
            assert len(victim.exits) == fault.worker_exits, (victim.exits, victim.log()[-3000:])

            await status.wait_finished(uids, timeout=60)
            finals = [await _assert_succeeded_once_where_placed(fleet, uid) for uid in uids]
            assert set(finals) <= set(OTHERS)
            assert await _leftovers(victim_cluster, uids) == []
            for beat in fleet.heartbeats.of(VICTIM, after=back_from):
                assert not set(beat.jobs) & set(uids), beat
            uids.append(await _probe_victim(fleet))
        except BaseException:
            sys.stderr.write(f"--- {VICTIM} worker logs ---\n{victim.log()[-8000:]}\n")
            raise
        finally:
            if injected and not repaired:
                await fault.repair(fleet_sandbox, victim)
            code = await victim.stop()
            assert code in (None, 0, -15), victim.log()[-3000:]
            await fleet.cleanup(uids)
