"""Operators' TrainJob runtimes on the bus (the compacted runtimes topic), on the in-memory
bus: applied, overriding, deleted by tombstone, invalid ones dead-lettered; the hub resolves
a TrainJob against them (catching up before it calls a runtime unknown), the assignment
carries the runtime to the worker, and a restarted hub knows them all."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bus.base import Record
from bus.dead_letters import dead_letter_reason
from bus.events import events_to_end, publish_payload
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub
from dispatcher.runtime_follower import RuntimeFollower
from schemas.codec import decode_event
from schemas.errors import JobInvalid
from schemas.events import EventType, JobAssigned, JobStatusUpdate, RuntimeApplied
from schemas.job_parsing import parse_job, parse_placed_job
from schemas.status import JobPhase
from schemas.trainer_runtimes import BUS, SHIPPED, runtime_catalog
from schemas.trainjob import TrainJob
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.producer import submit_with_id
from trainhub.sdk import AsyncTrainHubClient
from trainhub.sdk_errors import RuntimeNotFoundError
from trainhub.settings import TrainhubSettings
from workers.cluster_spec import parse_cluster_spec

SHIPPED_TORCH = Path(__file__).parents[2] / "schemas" / "runtimes" / "torch_distributed.yaml"
TOPICS = Topics()


def team_runtime(name: str = "team-torch", image: str = "team/torch:1") -> dict[str, Any]:
    """Upstream's torch runtime under another name, its node image changed (to tell it)."""
    runtime: dict[str, Any] = yaml.safe_load(SHIPPED_TORCH.read_text("utf-8"))
    runtime["metadata"] = {"name": name}
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        for container in job["template"]["spec"]["template"]["spec"]["containers"]:
            container["image"] = image
    return runtime


def trainjob(name: str, runtime: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runtimeRef": {"name": runtime},
            "managedBy": "trainhub.io/dispatcher",
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {"requests": {"cpu": "1", "memory": "1Gi"}},
            },
        },
    }


def node_image(job: TrainJob) -> str | None:
    containers = job.replica_specs["node"].template.spec.containers
    return next(c.image for c in containers if c.name == "node")


def _options() -> EmbeddedOptions:
    return EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=8,memory=16Gi,nodes=2")],
        backend="sim",
        heartbeat_interval=0.2,
    )


@pytest.fixture
async def system() -> AsyncIterator[tuple[MemoryBus, Embedded, AsyncTrainHubClient]]:
    bus = MemoryBus()
    embedded = await Embedded(_options(), bus=bus).__aenter__()
    client = AsyncTrainHubClient(settings=TrainhubSettings(), bus=bus)
    try:
        yield bus, embedded, client
    finally:
        await client.close()
        await embedded.__aexit__(None, None, None)


async def statuses(bus: MemoryBus, uid: str) -> list[JobStatusUpdate]:
    return [
        event.data_as(JobStatusUpdate)
        async for event in events_to_end(bus, TOPICS.status, keys={uid})
        if event.type == EventType.JOB_STATUS
    ]


async def phase_reached(bus: MemoryBus, uid: str, *phases: JobPhase) -> JobStatusUpdate:
    for _ in range(200):
        for update in await statuses(bus, uid):
            if update.phase in phases:
                return update
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {uid} never reached {phases}: {await statuses(bus, uid)}")


async def until_known(follower: RuntimeFollower, name: str, image: str | None = None) -> None:
    for _ in range(200):
        found = follower.catalog.entries().get(("ClusterTrainingRuntime", "", name))
        if found is not None and found[1] == BUS:
            containers = found[0].spec.template.spec.replicatedJobs[-1].containers()
            if image is None or any(c.get("image") == image for c in _dumped(containers)):
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the hub never knew {name} ({image})")


def _dumped(containers: list[Any]) -> list[dict[str, Any]]:
    return [c if isinstance(c, dict) else c.model_dump(mode="json") for c in containers]


def hub_of(embedded: Embedded) -> Hub:
    return embedded.hub


# -- the catalog -----------------------------------------------------------------------------


async def test_applied_runtimes_override_shipped_ones_and_a_tombstone_deletes(
    system: tuple[MemoryBus, Embedded, AsyncTrainHubClient],
) -> None:
    bus, embedded, client = system
    follower = hub_of(embedded).context.runtimes
    key = await client.apply_runtime(team_runtime())
    assert key == "ClusterTrainingRuntime//team-torch"
    # Shipped < files < the bus: an operator's torch-distributed overrides the shipped one.
    await client.apply_runtime(team_runtime("torch-distributed", image="team/torch:2"))
    await until_known(follower, "torch-distributed", "team/torch:2")
    await until_known(follower, "team-torch")
    entries = (await client.runtimes()).entries()
    assert entries[("ClusterTrainingRuntime", "", "torch-distributed")][1] == BUS
    assert entries[("ClusterTrainingRuntime", "", "team-torch")][1] == BUS
    assert (
        runtime_catalog().entries()[("ClusterTrainingRuntime", "", "torch-distributed")][1]
        == SHIPPED
    ), "the process's own catalog is left as it was"

    # Applying again replaces; the compacted topic keeps one record per key.
    await client.apply_runtime(team_runtime(image="team/torch:3"))
    await until_known(follower, "team-torch", "team/torch:3")
    keys = [r.key for r in bus.records(TOPICS.runtimes)]
    assert set(keys) == {
        b"ClusterTrainingRuntime//team-torch",
        b"ClusterTrainingRuntime//torch-distributed",
    }

    # Deleting the override shows the shipped runtime again; deleting the other removes it.
    await client.delete_runtime("torch-distributed")
    await client.delete_runtime("team-torch")
    assert bus.records(TOPICS.runtimes)[-1].value is None  # a tombstone
    for _ in range(200):
        entries = follower.catalog.entries()
        if ("ClusterTrainingRuntime", "", "team-torch") not in entries:
            break
        await asyncio.sleep(0.02)
    assert ("ClusterTrainingRuntime", "", "team-torch") not in entries
    assert entries[("ClusterTrainingRuntime", "", "torch-distributed")][1] == SHIPPED
    with pytest.raises(RuntimeNotFoundError, match="no ClusterTrainingRuntime team-torch"):
        await client.delete_runtime("team-torch")
    with pytest.raises(JobInvalid, match="mlPolicy"):
        await client.apply_runtime({**team_runtime(), "spec": {"mlPolicy": 3}})


async def test_invalid_records_on_the_topic_are_dead_lettered_once_with_the_reason() -> None:
    bus = MemoryBus()
    embedded = await Embedded(_options(), bus=bus).__aenter__()
    broken = team_runtime("broken")
    broken["spec"]["mlPolicy"] = {"torch": {"numProcPerNode": "many"}, "mpi": {}}
    await publish_payload(
        bus,
        TOPICS.runtimes,
        "ClusterTrainingRuntime//broken",
        EventType.RUNTIME_APPLIED,
        "someone",
        RuntimeApplied(runtime=broken),
    )
    # A record whose key names another runtime than its document.
    await publish_payload(
        bus,
        TOPICS.runtimes,
        "ClusterTrainingRuntime//elsewhere",
        EventType.RUNTIME_APPLIED,
        "someone",
        RuntimeApplied(runtime=team_runtime("team-torch")),
    )
    await bus.publish(TOPICS.runtimes, b"not an event", key=b"nonsense")

    def dead() -> list[Record]:
        return [r for r in bus.records(TOPICS.dead_letters) if r.topic == TOPICS.dead_letters]

    for _ in range(200):
        if len(dead()) >= 3:
            break
        await asyncio.sleep(0.02)
    reasons = [dead_letter_reason(r) or "" for r in dead()]
    assert len(reasons) == 3, reasons
    assert reasons[0].startswith("invalid runtime: runtime ClusterTrainingRuntime//broken")
    assert "names another runtime than its document" in reasons[1]
    assert "expected KIND/NAMESPACE/NAME" in reasons[2]
    follower = hub_of(embedded).context.runtimes
    assert not any(
        k[2] in ("broken", "elsewhere", "team-torch") for k in follower.catalog.entries()
    )

    await embedded.__aexit__(None, None, None)
    await bus.start()  # the embedded system closed it

    # A hub started again reads them again but sets none aside twice.
    hub = Hub(bus, TOPICS, embedded.hub.config)
    await hub.start()
    await hub.stop()
    assert len(dead()) == 3


# -- placing TrainJobs -------------------------------------------------------------------------


async def test_an_unknown_runtime_is_rejected_naming_the_known_ones_with_the_buss(
    system: tuple[MemoryBus, Embedded, AsyncTrainHubClient],
) -> None:
    bus, _, client = system
    await client.apply_runtime(team_runtime())
    uid = await _submit_raw(bus, trainjob("lost", "no-such-runtime"))
    rejected = await phase_reached(bus, uid, JobPhase.REJECTED)
    message = rejected.message or ""
    assert "unsupported runtime: ClusterTrainingRuntime 'no-such-runtime'" in message
    assert "team-torch" in message and "torch-distributed" in message, message


async def test_a_job_submitted_right_after_its_runtime_waits_for_the_lagging_follower(
    system: tuple[MemoryBus, Embedded, AsyncTrainHubClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    bus, embedded, client = system
    follower = hub_of(embedded).context.runtimes
    apply = follower._apply

    async def lagging(records: list[Record], *args: Any) -> None:
        if records:
            await asyncio.sleep(1.0)  # the follower is behind when the job arrives
        await apply(records, *args)

    monkeypatch.setattr(follower, "_apply", lagging)
    await client.apply_runtime(team_runtime())
    uid = await _submit_raw(bus, trainjob("raced", "team-torch"))
    placed = await phase_reached(bus, uid, JobPhase.ASSIGNED, JobPhase.REJECTED)
    assert placed.phase == JobPhase.ASSIGNED, placed.message


async def test_the_assignment_carries_the_runtime_and_a_later_change_leaves_the_job_as_placed(
    system: tuple[MemoryBus, Embedded, AsyncTrainHubClient],
) -> None:
    bus, embedded, client = system
    follower = hub_of(embedded).context.runtimes
    await client.apply_runtime(team_runtime(image="team/torch:1"))
    await until_known(follower, "team-torch")
    uid = await client.create_job(trainjob("pinned", "team-torch"))
    await phase_reached(bus, uid, JobPhase.SUCCEEDED, JobPhase.RUNNING)
    await client.apply_runtime(team_runtime(image="team/torch:2"))
    await client.delete_runtime("team-torch")

    assigned = [
        decode_event(r.headers, r.value).data_as(JobAssigned)
        for r in bus.records(TOPICS.assignments("solo"))
        if r.value is not None and r.key == uid.encode()
    ]
    assert assigned and assigned[0].runtime is not None
    assert assigned[0].runtime["metadata"]["name"] == "team-torch"
    # The worker's process has never heard of team-torch: the runtime comes with the job.
    with pytest.raises(JobInvalid, match="unsupported runtime"):
        parse_job(assigned[0].job)
    job = parse_placed_job(assigned[0].job, assigned[0].runtime)
    assert isinstance(job, TrainJob) and node_image(job) == "team/torch:1"
    # The run the sim worker made of it succeeded (pods named as JobSet names them).
    done = await phase_reached(bus, uid, JobPhase.SUCCEEDED, JobPhase.FAILED)
    assert done.phase == JobPhase.SUCCEEDED, done.message
    # Readers render it with the runtime the hub placed it with, though it is gone now.
    view = await client.get_job("pinned")
    assert view.runtime is not None and view.runtime["metadata"]["name"] == "team-torch"


async def test_a_restarted_hub_knows_every_runtime_and_keeps_placed_jobs_as_placed() -> None:
    bus = MemoryBus()
    embedded = await Embedded(_options(), bus=bus).__aenter__()
    client = AsyncTrainHubClient(settings=TrainhubSettings(), bus=bus)
    try:
        await client.apply_runtime(team_runtime("held-runtime", image="team/torch:1"))
        await client.apply_runtime(team_runtime("other-runtime"))
        held = trainjob("held", "held-runtime")
        held["spec"]["suspend"] = True
        uid = await client.create_job(held)
        await phase_reached(bus, uid, JobPhase.SUSPENDED)
        await client.delete_runtime("held-runtime")
    finally:
        await client.close()
        await embedded.__aexit__(None, None, None)
    await bus.start()  # the embedded system closed it

    hub = Hub(bus, TOPICS, embedded.hub.config)
    await hub.start()
    try:
        # The whole compacted topic, from its start: every runtime still applied.
        names = hub.context.runtimes.catalog.names()
        assert "other-runtime" in names and "held-runtime" not in names
        # A job resolved before keeps its runtime (from the state topic), though deleted since.
        record = hub.ledger.get(uid)
        assert record is not None and isinstance(record.job, TrainJob)
        assert record.job.runtime.metadata.name == "held-runtime"
        assert node_image(record.job) == "team/torch:1"
    finally:
        await hub.stop()


async def _submit_raw(bus: MemoryBus, document: dict[str, Any]) -> str:
    """Submit without the client's own check (the hub judges the runtime)."""
    uid, _ = await submit_with_id(bus, TOPICS, copy.deepcopy(document))
    return uid
