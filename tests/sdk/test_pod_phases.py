"""Pod phases reach the SDKs from the worker of the job's cluster (one round trip on the bus):
`AsyncTrainHubClient.get_job_pods`, the v1 drop-in's `V1Pod.status` and the v2 drop-in's
steps; a worker that does not answer leaves them unknown within the timeout, not failing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from bus.memory import MemoryBus
from tests.helpers import jax_job
from trainhub import AsyncTrainHubClient
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.sdk_pods import JobPod
from trainhub.settings import TrainhubSettings
from trainhub.training_client import TrainingClient
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec

CLUSTER = "solo:cpu=8,memory=16Gi"


def options() -> EmbeddedOptions:
    return EmbeddedOptions(
        clusters=[parse_cluster_spec(CLUSTER)], backend="sim", heartbeat_interval=0.2
    )


class KeptSim(SimBackend):
    """A cluster whose pods outlive its worker (as a real one's): a stopped worker hands
    nothing back, so the hub still has the job on it."""

    keeps_pods = True


async def phases_become(
    client: AsyncTrainHubClient, name: str, wanted: list[str], timeout: float = 20
) -> list[JobPod]:
    """The job's pods once their phases are `wanted` (pods start one after another)."""
    async with asyncio.timeout(timeout):
        while True:
            pods = await client.get_job_pods(name)
            if [p.phase for p in pods] == wanted:
                return pods
            await asyncio.sleep(0.1)


async def test_running_finished_and_failed_pods_have_their_phases() -> None:
    async with (
        Embedded(options()) as system,
        AsyncTrainHubClient(settings=TrainhubSettings(), bus=system.bus) as client,
    ):
        await client.create_job(jax_job("busy", duration="30s"))
        await client.create_job(jax_job("quick", duration="0.05s"))
        await client.create_job(jax_job("crash", workers=1, exit_code="3"))

        busy = await phases_become(client, "busy", ["Running", "Running"])
        assert [(p.name, p.cluster) for p in busy] == [
            ("busy-worker-0", "solo"),
            ("busy-worker-1", "solo"),
        ]
        assert all(p.node_name and isinstance(p.start_time, datetime) for p in busy)
        await client.wait_for_job_conditions("quick", timeout=20)
        assert [p.phase for p in await client.get_job_pods("quick")] == ["Succeeded"] * 2
        await client.wait_for_job_conditions("crash", expected_conditions={"Failed"}, timeout=20)
        [crashed] = await client.get_job_pods("crash")
        assert (crashed.phase, crashed.message) == ("Failed", "its container exited with code 3")
        # Names alone ask no worker, and the filters pick as before.
        assert await client.get_job_pod_names("busy", replica_index=1) == ["busy-worker-1"]


async def test_a_silent_worker_leaves_the_phases_none_within_the_timeout() -> None:
    backend = KeptSim(parse_cluster_spec(CLUSTER).pool())
    async with (
        Embedded(options(), backends={"solo": backend}) as system,
        AsyncTrainHubClient(settings=TrainhubSettings(), bus=system.bus) as client,
    ):
        await client.create_job(jax_job("orphan", duration="30s"))
        await phases_become(client, "orphan", ["Running", "Running"])
        await system.worker("solo").stop()

        began = time.monotonic()
        pods = await client.get_job_pods("orphan", phase_timeout=0.5)
        assert time.monotonic() - began < 3
        assert [(p.name, p.phase) for p in pods] == [
            ("orphan-worker-0", None),
            ("orphan-worker-1", None),
        ]
        assert (await client.get_job("orphan")).cluster == "solo"  # still placed there
        with pytest.raises(ValueError, match="phase_timeout"):
            await client.get_job_pods("orphan", phase_timeout="soon")  # type: ignore[arg-type]


@pytest.fixture
def training() -> Iterator[TrainingClient]:
    bus = MemoryBus()
    client = TrainingClient(settings=TrainhubSettings(), bus=bus)
    system: Embedded = client.hub.run_on_loop(Embedded(options(), bus=bus).__aenter__())
    try:
        yield client
    finally:
        client.hub.run_on_loop(client.hub.aio.close())
        client.hub.run_on_loop(system.__aexit__(None, None, None))
        client.close()


def test_the_v1_drop_in_gives_each_v1pod_its_status(training: TrainingClient) -> None:
    training.create_job(jax_job("busy", duration="30s"))
    deadline = time.monotonic() + 20
    pods: list[Any] = []
    while time.monotonic() < deadline:
        pods = training.get_job_pods("busy")
        if [p.status.phase if p.status else None for p in pods] == ["Running", "Running"]:
            break
        time.sleep(0.1)
    assert [p.status.phase for p in pods] == ["Running", "Running"]
    assert all(isinstance(p.status.start_time, datetime) for p in pods)
    assert all(p.spec.node_name for p in pods)
    assert pods[0].to_dict()["status"]["phase"] == "Running"

    training.create_job(jax_job("crash", workers=1, exit_code="3"))
    training.wait_for_job_conditions(
        "crash", job_kind="JAXJob", expected_conditions={"Failed"}, polling_interval=1
    )
    [crashed] = training.get_job_pods("crash")
    assert crashed.metadata.name == "crash-worker-0"
    assert crashed.status.phase == "Failed"
    assert training.get_job_pod_names("busy", replica_index=0) == ["busy-worker-0"]
