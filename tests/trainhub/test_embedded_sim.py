"""The whole flow in one process on the sim backend: placement, queueing, bad input."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

import pytest

from bus.dead_letters import dead_letter_reason
from bus.memory import MemoryBus
from schemas.status import JobPhase
from tests.helpers import jax_job, on_host_network
from trainhub.embedded import Embedded, EmbeddedOptions
from workers.cluster_spec import parse_cluster_spec


def _options(*clusters: str) -> EmbeddedOptions:
    return EmbeddedOptions(
        clusters=[parse_cluster_spec(c) for c in clusters],
        backend="sim",
        heartbeat_interval=0.2,
    )


@pytest.fixture
async def system() -> AsyncIterator[Embedded]:
    async with Embedded(_options("east:cpu=4,memory=8Gi", "west:cpu=4,memory=8Gi")) as running:
        yield running


async def test_one_job_goes_through_every_phase(system: Embedded) -> None:
    uid = await system.submit(jax_job("one", workers=2))
    phases: list[JobPhase] = []
    final = await system.wait_finished([uid], lambda u: phases.append(u.phase), timeout=20)
    assert final[uid].phase == JobPhase.SUCCEEDED
    # A Queued job may get a second Queued note (why it waits) before its placement.
    steps = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert steps == [
        JobPhase.QUEUED,
        JobPhase.ASSIGNED,
        JobPhase.CREATED,
        JobPhase.RUNNING,
        JobPhase.SUCCEEDED,
    ]
    status = final[uid].status
    assert status is not None
    assert status.replicaStatuses["Worker"].succeeded == 2
    for _ in range(100):  # the hub reads the same status topic on its own schedule
        record = system.hub.ledger.get(uid)
        if record is not None and record.phase == JobPhase.SUCCEEDED:
            break
        await asyncio.sleep(0.05)
    assert record is not None and record.phase == JobPhase.SUCCEEDED


async def test_many_jobs_queue_when_full_and_all_finish(system: Embedded) -> None:
    # 2 clusters x 4 cpu; each job takes 2 cpu for 0.3 s: at most 4 run at once.
    uids = [
        await system.submit(jax_job(f"many-{i}", workers=2, cpu="1", duration="0.3s"))
        for i in range(20)
    ]
    waited = set()

    def note(update: object) -> None:
        if getattr(update, "reason", None) == "WaitingForCapacity":
            waited.add(getattr(update, "uid", None))

    final = await system.wait_finished(uids, note, timeout=60)
    assert {u.phase for u in final.values()} == {JobPhase.SUCCEEDED}
    assert waited, "with 20 jobs and room for 4, some must have waited"
    assert {u.cluster for u in final.values()} == {"east", "west"}


async def test_placement_never_over_fills_a_cluster() -> None:
    options = _options("solo:cpu=4,memory=8Gi")
    options.heartbeat_interval = 5.0  # heartbeats lag: only reservations protect capacity
    async with Embedded(options) as system:
        worker = system.worker("solo")
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                capacity = await worker.backend.capacity()
                running = sum(n.requested.get("cpu", 0) for n in capacity.nodes)
                peak = max(peak, int(running))
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        uids = [
            await system.submit(jax_job(f"burst-{i}", workers=1, cpu="1", duration="0.2s"))
            for i in range(12)
        ]
        final = await system.wait_finished(uids, timeout=60)
        watcher.cancel()
        assert {u.phase for u in final.values()} == {JobPhase.SUCCEEDED}
        assert 0 < peak <= 4


async def test_job_that_fits_nowhere_is_rejected_with_the_short_resource(system: Embedded) -> None:
    uid = await system.submit(jax_job("huge", workers=1, extra_resources={"nvidia.com/gpu": "8"}))
    final = await system.wait_finished([uid], timeout=20)
    assert final[uid].phase == JobPhase.REJECTED
    assert "nvidia.com/gpu" in (final[uid].message or "")


async def test_job_managed_elsewhere_is_skipped(system: Embedded) -> None:
    uid = await system.submit(jax_job("theirs", managed=False))
    final = await system.wait_finished([uid], timeout=20)
    assert final[uid].phase == JobPhase.SKIPPED
    assert "trainhub leaves this job alone" in (final[uid].message or "")
    assert not any(w.runs for w in system.workers)


async def test_a_managed_by_naming_no_known_controller_is_rejected_not_skipped(
    system: Embedded,
) -> None:
    doc = jax_job("typo")
    doc["spec"]["runPolicy"]["managedBy"] = "trainhub.io/dispatch"
    uid = await system.submit(doc)
    final = await system.wait_finished([uid], timeout=20)
    assert final[uid].phase == JobPhase.REJECTED
    assert "runPolicy.managedBy" in (final[uid].message or "")
    assert "'trainhub.io/dispatcher'" in (final[uid].message or "")
    assert not any(w.runs for w in system.workers)


async def test_invalid_job_is_rejected_and_dead_lettered(system: Embedded) -> None:
    doc = jax_job("broken")
    doc["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] = -3
    uid = await system.submit(doc)
    final = await system.wait_finished([uid], timeout=20)
    assert final[uid].phase == JobPhase.REJECTED
    assert "replicas" in (final[uid].message or "") and "-3" in (final[uid].message or "")
    # Invalid as a job, it is still called what it calls itself.
    assert (final[uid].kind, final[uid].namespace, final[uid].name) == (
        "JAXJob",
        "default",
        "broken",
    )
    assert isinstance(system.bus, MemoryBus)
    dead = system.bus.records(system.topics.dead_letters)
    assert len(dead) == 1
    assert "replicas" in (dead_letter_reason(dead[0]) or "")
    assert json.loads(dead[0].value or b"{}")["job"]["metadata"]["name"] == "broken"


async def test_mxjob_and_unknown_kind_are_rejected(system: Embedded) -> None:
    mx = jax_job("old") | {"kind": "MXJob"}
    weird = jax_job("weird") | {"kind": "SparkJob"}
    uids = [await system.submit(mx), await system.submit(weird)]
    final = await system.wait_finished(uids, timeout=20)
    assert "removed in Kubeflow Training Operator v1.9" in (final[uids[0]].message or "")
    assert "unknown kind 'SparkJob'" in (final[uids[1]].message or "")


async def test_undecodable_record_goes_to_dead_letters_and_flow_continues(system: Embedded) -> None:
    await system.bus.publish(system.topics.jobs, b"\x00garbage", key=b"x")
    uid = await system.submit(jax_job("after-garbage", workers=1))
    final = await system.wait_finished([uid], timeout=20)
    assert final[uid].phase == JobPhase.SUCCEEDED
    assert isinstance(system.bus, MemoryBus)
    reasons = [dead_letter_reason(r) for r in system.bus.records(system.topics.dead_letters)]
    assert any("undecodable" in (r or "") for r in reasons)


async def test_same_job_submitted_twice_runs_once(system: Embedded) -> None:
    doc = jax_job("twice", workers=1, duration="0.5s")
    uid = await system.submit(doc)
    assert await system.submit(doc) == uid
    final = await system.wait_finished([uid], timeout=20)
    assert final[uid].phase == JobPhase.SUCCEEDED
    assigned = [w.cluster for w in system.workers if uid in w.runs]
    assert len(assigned) == 1
    assert system.hub.ledger.get(uid).attempt == 1  # type: ignore[union-attr]


async def test_failed_pod_fails_a_never_restart_job(system: Embedded) -> None:
    uid = await system.submit(jax_job("fails", workers=2, exit_code="3"))
    final = await system.wait_finished([uid], timeout=20)
    assert final[uid].phase == JobPhase.FAILED
    assert "exited with code 3" in (final[uid].message or "")


async def test_metrics_cover_jobs_latency_queue_and_capacity(system: Embedded) -> None:
    from prometheus_client import generate_latest

    uid = await system.submit(jax_job("measured", workers=1))
    await system.wait_finished([uid], timeout=20)
    await asyncio.sleep(1.2)  # one scheduling pass exports the job gauges
    text = generate_latest(system.registry).decode()
    succeeded = r'trainhub_hub_jobs\{cluster="(east|west)",framework="jax",phase="Succeeded",'
    assert re.search(succeeded + r'queue="default"\} 1\.0', text)
    assert "trainhub_placement_latency_seconds_count 1.0" in text
    assert 'trainhub_queue_length{queue="default"} 0.0' in text
    assert 'trainhub_cluster_free{cluster="east",resource="cpu"}' in text
    assert 'trainhub_worker_cluster_free{cluster="west",resource="memory"}' in text


async def test_deleted_job_can_run_again_under_the_same_name(system: Embedded) -> None:
    from schemas.events import EventType
    from trainhub.producer import request

    doc = jax_job("again", workers=1, duration="0.2s")
    uid = await system.submit(doc)
    first = await system.wait_finished([uid], timeout=20)
    assert first[uid].phase == JobPhase.SUCCEEDED
    await request(system.bus, system.topics, EventType.JOB_DELETED, uid)
    for _ in range(100):
        record = system.hub.ledger.get(uid)
        if record is not None and record.phase == JobPhase.DELETED:
            break
        await asyncio.sleep(0.05)
    assert uid not in system.worker(first[uid].cluster or "").runs  # the revoke reached it
    assert await system.submit(doc) == uid
    phases: list[tuple[JobPhase, int]] = []
    for _ in range(200):
        record = system.hub.ledger.get(uid)
        if record is not None and record.phase == JobPhase.SUCCEEDED and record.attempt == 2:
            break
        await asyncio.sleep(0.05)
    record = system.hub.ledger.get(uid)
    assert record is not None and (record.phase, record.attempt) == (JobPhase.SUCCEEDED, 2), phases


async def test_host_network_jobs_run_where_allowed_one_pod_to_a_node() -> None:
    options = _options(
        "pods:cpu=8,memory=16Gi,nodes=4", "host:cpu=8,memory=16Gi,nodes=3,allow=hostNetwork"
    )
    async with Embedded(options) as running:
        documents = [
            on_host_network(jax_job(name, workers=workers, duration="0.3s"))
            for name, workers in (("on-host", 3), ("too-many", 4))
        ]
        uids = [await running.submit(d) for d in documents]
        final = await running.wait_finished(uids, timeout=20)
    placed = final[uids[0]]
    assert placed.phase == JobPhase.SUCCEEDED and placed.cluster == "host"
    refused = final[uids[1]]
    assert refused.phase == JobPhase.REJECTED
    assert "pods: pod security policy: hostNetwork is not allowed here" in (refused.message or "")
    assert "room for 3 of 4 Worker pods" in (refused.message or "")


async def test_a_stopped_worker_says_so_and_gets_no_new_jobs() -> None:
    async with Embedded(_options("east:cpu=8,memory=16Gi", "west:cpu=4,memory=8Gi")) as running:
        for _ in range(200):
            if len(running.hub.clusters.all()) == 2:
                break
            await asyncio.sleep(0.05)
        await running.worker("east").stop()  # the roomier cluster: placement's first choice
        for _ in range(100):
            east = running.hub.clusters.get("east")
            if east is not None and not east.healthy:
                break
            await asyncio.sleep(0.05)
        assert east is not None and east.unhealthyReason == "its worker stopped"
        uid = await running.submit(jax_job("after-stop", workers=1, duration="0.2s"))
        final = await running.wait_finished([uid], timeout=20)
        assert final[uid].phase == JobPhase.SUCCEEDED and final[uid].cluster == "west"
