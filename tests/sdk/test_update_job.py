"""`update_job`: a job's spec replaced while it has no pods, only a suspend while it has; the
hub applies what the rules allow and dead-letters the rest, and a restarted hub keeps it."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bus.dead_letters import dead_letter_reason
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.status import JobPhase
from tests.helpers import jax_job, until
from trainhub import AsyncTrainHubClient, JobNotFoundError, JobUpdateError
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.producer import submit_document, update_document
from trainhub.settings import TrainhubSettings
from workers.cluster_spec import parse_cluster_spec


@pytest.fixture
async def system(tmp_path: Path) -> AsyncIterator[tuple[Embedded, AsyncTrainHubClient]]:
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=4,memory=8Gi")],
        backend="sim",
        heartbeat_interval=0.2,
        logs_dir=tmp_path,
    )
    async with Embedded(options) as embedded:
        async with AsyncTrainHubClient(settings=TrainhubSettings(), bus=embedded.bus) as client:
            yield embedded, client


async def _reason(client: AsyncTrainHubClient, name: str, reason: str) -> None:
    for _ in range(400):
        if (await client.get_job(name)).reason == reason:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never had reason {reason}")


def _with_workers(document: dict[str, Any], workers: int) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] = workers
    return changed


async def test_a_held_job_takes_the_new_spec_and_runs_it_when_resumed(
    system: tuple[Embedded, AsyncTrainHubClient],
) -> None:
    _, client = system
    held = jax_job("held", workers=2, duration="0.2s")
    held["spec"]["runPolicy"]["suspend"] = True
    await client.create_job(held)
    await client.wait_for_job_conditions("held", expected_conditions={"Suspended"}, timeout=20)
    await client.update_job(_with_workers(held, 3))  # suspend still true: stays held
    await _reason(client, "held", "Updated")
    job = await client.get_job("held")
    assert job.phase == JobPhase.SUSPENDED and job.cluster is None
    assert job.spec is not None and job.spec["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] == 3
    released = _with_workers(held, 3)
    released["spec"]["runPolicy"]["suspend"] = False  # explicit: resumes the job
    await client.update_job(released)
    job = await client.wait_for_job_conditions("held", timeout=20)
    assert job.phase == JobPhase.SUCCEEDED
    assert job.status.replicaStatuses["Worker"].succeeded == 3


async def test_a_running_job_may_only_be_suspended_and_then_changes_freely(
    system: tuple[Embedded, AsyncTrainHubClient],
) -> None:
    _, client = system
    long = jax_job("long", workers=2, duration="30s")
    await client.create_job(long)
    await client.wait_for_job_conditions("long", expected_conditions={"Running"}, timeout=20)
    with pytest.raises(JobUpdateError, match=r"only runPolicy\.suspend may change"):
        await client.update_job(_with_workers(long, 1))
    suspended = copy.deepcopy(long)
    suspended["spec"]["runPolicy"]["suspend"] = True
    await client.update_job(suspended)
    await client.wait_for_job_conditions("long", expected_conditions={"Suspended"}, timeout=20)
    assert (await client.get_job("long")).cluster == "solo"
    # Suspended in its cluster: the new spec takes the job back, held until resumed.
    shorter = _with_workers(jax_job("long", workers=2, duration="0.2s"), 1)
    await client.update_job(shorter)
    await _reason(client, "long", "Updated")
    job = await client.get_job("long")
    assert job.phase == JobPhase.SUSPENDED and job.cluster is None
    await client.resume_job("long")
    job = await client.wait_for_job_conditions("long", timeout=20)
    assert job.phase == JobPhase.SUCCEEDED and job.attempt == 2
    assert job.status.replicaStatuses["Worker"].succeeded == 1


async def test_a_queued_job_waiting_for_room_can_ask_for_less(
    system: tuple[Embedded, AsyncTrainHubClient],
) -> None:
    _, client = system
    await client.create_job(jax_job("big", workers=1, cpu="3", duration="30s"))
    await client.wait_for_job_conditions("big", expected_conditions={"Running"}, timeout=20)
    waiting = jax_job("waiting", workers=1, cpu="2")
    await client.create_job(waiting)
    await _reason(client, "waiting", "WaitingForCapacity")
    await client.update_job(jax_job("waiting", workers=1, cpu="1"))
    job = await client.wait_for_job_conditions("waiting", timeout=20)
    assert job.phase == JobPhase.SUCCEEDED and job.cluster == "solo"


async def test_updates_that_cannot_apply_are_refused_at_once(
    system: tuple[Embedded, AsyncTrainHubClient],
) -> None:
    _, client = system
    with pytest.raises(JobNotFoundError, match="create it instead"):
        await client.update_job(jax_job("nobody"))
    await client.create_job(jax_job("done"))
    await client.wait_for_job_conditions("done", timeout=20)
    with pytest.raises(JobUpdateError, match="is Succeeded: a finished job cannot be updated"):
        await client.update_job(_with_workers(jax_job("done"), 1))
    held = jax_job("held")
    held["spec"]["runPolicy"]["suspend"] = True
    await client.create_job(held)
    await client.wait_for_job_conditions("held", expected_conditions={"Suspended"}, timeout=20)
    other_kind = jax_job("held")
    other_kind["kind"] = "PyTorchJob"
    other_kind["spec"]["pytorchReplicaSpecs"] = other_kind["spec"].pop("jaxReplicaSpecs")
    other_kind["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "name"
    ] = "pytorch"
    with pytest.raises(JobUpdateError, match="the kind of job default/held is JAXJob"):
        await client.update_job(other_kind)
    with pytest.raises(ValueError, match="replicas"):
        await client.update_job(_with_workers(jax_job("done"), -1))


async def test_the_hub_dead_letters_what_it_refuses_and_a_restart_keeps_updates() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="updates")
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await hub.start()
    held = jax_job("held")
    held["spec"]["runPolicy"]["suspend"] = True
    uid = await submit_document(bus, topics, held)
    await until(lambda: (r := hub.ledger.get(uid)) is not None and r.phase == JobPhase.SUSPENDED)
    # Straight to the bus, past the SDK's checks: the hub judges alone.
    moved = copy.deepcopy(held)
    moved["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    await update_document(bus, topics, moved)
    await until(lambda: len(bus.records(topics.dead_letters)) == 1)
    reason = dead_letter_reason(bus.records(topics.dead_letters)[0]) or ""
    assert "update refused: runPolicy.managedBy is immutable" in reason
    await update_document(bus, topics, _with_workers(held, 4))
    await until(lambda: (r := hub.ledger.get(uid)) is not None and r.reason == "Updated")
    await hub.stop()

    restarted = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await restarted.start()
    try:
        record = restarted.ledger.get(uid)
        assert record is not None and record.phase == JobPhase.SUSPENDED
        assert record.job is not None and record.job.replicas_of("Worker") == 4
        assert record.managed_by == "trainhub.io/dispatcher"
    finally:
        await restarted.stop()
