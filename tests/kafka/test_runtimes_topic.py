"""Operators' runtimes over the real broker: `trainhub runtime apply` publishes one, a hub
process places a TrainJob naming it on a sim worker process that has never heard of it (the
assignment carries it), and a hub started again knows it from the compacted topic."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from pydantic import BaseModel

from bus.events import events_to_end
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.reading import records_to_end
from bus.topics import Topics
from schemas.codec import decode_event
from schemas.events import EventType, JobAssigned, JobStatusUpdate
from schemas.status import JobPhase
from tests.cli import run_trainhub
from tests.kafka.processes import Process, sim_worker
from tests.kafka.status_topic import final_phases

pytestmark = pytest.mark.kafka

SHIPPED_TORCH = Path(__file__).parents[2] / "schemas" / "runtimes" / "torch_distributed.yaml"


def team_runtime() -> dict[str, Any]:
    runtime: dict[str, Any] = yaml.safe_load(SHIPPED_TORCH.read_text("utf-8"))
    runtime["metadata"] = {"name": "team-torch"}
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]
        pod.setdefault("metadata", {})["annotations"] = {"trainhub.io/sim-duration": "0.5s"}
        for container in pod["spec"]["containers"]:
            container["image"] = "team/torch:1"
    return runtime


def trainjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "team-torch"},
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {"requests": {"cpu": "1", "memory": "1Gi"}},
            },
        },
    }


def trainhub(*args: str) -> subprocess.CompletedProcess[str]:
    return run_trainhub(*args)


_Data = TypeVar("_Data", bound=BaseModel)


async def _events(
    settings: KafkaSettings, topic: str, kind: str, model: type[_Data]
) -> list[_Data]:
    """Every event of `kind` on `topic` so far, as `model`."""
    bus = KafkaBus(settings)
    await bus.start()
    try:
        return [
            event.data_as(model) async for event in events_to_end(bus, topic) if event.type == kind
        ]
    finally:
        await bus.close()


async def _finished(settings: KafkaSettings, topics: Topics, name: str) -> JobStatusUpdate:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        statuses = await _events(settings, topics.status, EventType.JOB_STATUS, JobStatusUpdate)
        updates = [u for u in statuses if u.name == name]
        final = final_phases(updates)
        for update in updates:
            if update.phase == final.get(update.uid) and update.phase.finished:
                return update
        await asyncio.sleep(0.5)
    raise AssertionError(f"{name} did not finish: {updates}")


async def test_a_runtime_applied_with_the_cli_places_trainjobs_and_survives_a_hub_restart(
    kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    common = ["--bootstrap", kafka_settings.bootstrap, "--topic-prefix", topics.prefix]
    runtime_file = tmp_path / "team-torch.yaml"
    runtime_file.write_text(yaml.safe_dump(team_runtime()))
    hub = Process("hub", ["hub", *common], tmp_path)
    worker = sim_worker("east", common, tmp_path)
    processes = [hub, worker]
    try:
        # An invalid runtime is refused before anything is published.
        bad = tmp_path / "bad.yaml"
        bad.write_text(yaml.safe_dump({**team_runtime(), "spec": {"mlPolicy": 7}}))
        refused = trainhub("runtime", "apply", "-f", str(bad), *common)
        assert refused.returncode == 1 and "mlPolicy" in refused.stderr, refused

        applied = trainhub("runtime", "apply", "-f", str(runtime_file), *common)
        assert applied.returncode == 0, applied.stderr
        assert "clustertrainingruntime/team-torch applied" in applied.stdout
        listed = trainhub("get", "runtimes", *common)
        assert listed.returncode == 0, listed.stderr
        row = next(line for line in listed.stdout.splitlines() if "team-torch" in line)
        assert row.split()[-1] == "bus" and "torch" in row, listed.stdout

        # Submitted at once: `submit` checks the runtime on the bus, the hub catches up.
        first = tmp_path / "first.yaml"
        first.write_text(yaml.safe_dump(trainjob("first")))
        submitted = trainhub("submit", str(first), *common)
        assert submitted.returncode == 0, submitted.stderr
        done = await _finished(kafka_settings, topics, "first")
        assert done.phase == JobPhase.SUCCEEDED, done.message
        carried = await _events(
            kafka_settings, topics.assignments("east"), EventType.JOB_ASSIGNED, JobAssigned
        )
        assert carried[0].runtime is not None
        assert carried[0].runtime["metadata"]["name"] == "team-torch"

        # A hub started again reads the compacted topic from its start.
        hub.terminate()
        restarted = Process("hub-again", ["hub", *common], tmp_path)
        processes.append(restarted)
        second = tmp_path / "second.yaml"
        second.write_text(yaml.safe_dump(trainjob("second")))
        submitted = trainhub("submit", str(second), *common)
        assert submitted.returncode == 0, submitted.stderr
        done = await _finished(kafka_settings, topics, "second")
        assert done.phase == JobPhase.SUCCEEDED, done.message

        # Deleted: the next TrainJob naming it is Rejected with the known runtimes listed.
        deleted = trainhub("runtime", "delete", "clustertrainingruntime/team-torch", *common)
        assert deleted.returncode == 0, deleted.stderr
        again = trainhub("runtime", "delete", "clustertrainingruntime/team-torch", *common)
        assert again.returncode == 3, again
        third = tmp_path / "third.yaml"
        third.write_text(yaml.safe_dump(trainjob("third")))
        unchecked = trainhub("submit", "--no-validate", str(third), *common)
        assert unchecked.returncode == 0, unchecked.stderr
        rejected = await _finished(kafka_settings, topics, "third")
        assert rejected.phase == JobPhase.REJECTED
        assert "team-torch" in (rejected.message or "")
        assert "known runtimes: mpi-distributed" in (rejected.message or "")
    finally:
        for process in processes:
            process.terminate()
    # Records on the topic are what `runtime apply` published: one key, a tombstone last.
    bus = KafkaBus(kafka_settings)
    await bus.start()
    try:
        records = [r async for r in records_to_end(bus, topics.runtimes)]
    finally:
        await bus.close()
    assert {r.key for r in records} == {b"ClusterTrainingRuntime//team-torch"}
    assert records[-1].value is None
    assert decode_event(records[0].headers, records[0].value).type == EventType.RUNTIME_APPLIED
