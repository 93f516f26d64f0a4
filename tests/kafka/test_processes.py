"""Hub and workers as separate OS processes on a real broker, as they are deployed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from schemas.codec import decode_event
from schemas.events import EventType, JobStatusUpdate
from schemas.status import JobPhase
from tests.cli import run_trainhub
from tests.helpers import jax_job
from tests.kafka.processes import Process, sim_worker

pytestmark = pytest.mark.kafka


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_trainhub(*args, timeout=timeout)


async def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a trainhub command without blocking the event loop."""
    return await asyncio.to_thread(_cli, *args, timeout=timeout)


def _common(kafka_settings: KafkaSettings, topics: Topics) -> list[str]:
    return ["--bootstrap", kafka_settings.bootstrap, "--topic-prefix", topics.prefix]


async def _statuses(settings: KafkaSettings, topics: Topics) -> list[JobStatusUpdate]:
    bus = KafkaBus(settings)
    await bus.start()
    subscription = bus.subscribe([topics.status], group=None)
    await subscription.start()
    updates: list[JobStatusUpdate] = []
    try:
        while True:
            for record in await subscription.poll(timeout=0.3, max_records=5000):
                event = decode_event(record.headers, record.value)
                if event.type == EventType.JOB_STATUS:
                    updates.append(event.data_as(JobStatusUpdate))
            if await subscription.lag() == 0:
                return updates
    finally:
        await subscription.stop()
        await bus.close()


def _final_phases(updates: list[JobStatusUpdate]) -> dict[str, JobPhase]:
    latest: dict[str, JobPhase] = {}
    for update in updates:
        latest[update.uid] = update.phase
    return latest


async def _wait_until(
    settings: KafkaSettings,
    topics: Topics,
    check: Callable[[list[JobStatusUpdate]], bool],
    timeout: float,
) -> list[JobStatusUpdate]:
    deadline = time.monotonic() + timeout
    while True:
        updates = await _statuses(settings, topics)
        if check(updates) or time.monotonic() > deadline:
            return updates
        await asyncio.sleep(0.5)


async def test_200_jobs_survive_a_hub_sigkill_without_loss_or_double_runs(
    kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    common = _common(kafka_settings, topics)
    hub = Process("hub-1", ["hub", *common], tmp_path)
    workers = [sim_worker(name, common, tmp_path) for name in ("east", "west")]
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(
        yaml.safe_dump_all(
            [jax_job(f"job-{i:03d}", workers=2, duration="0.4s") for i in range(200)]
        )
    )
    submit = await cli("submit", str(jobs_file), *common)
    assert submit.returncode == 0, submit.stderr
    assert submit.stdout.count("submitted ") == 200

    def some_placed(updates: list[JobStatusUpdate]) -> bool:
        return sum(u.phase == JobPhase.ASSIGNED for u in updates) >= 40

    await _wait_until(kafka_settings, topics, some_placed, 60)
    hub.kill()
    restarted = Process("hub-2", ["hub", *common], tmp_path)
    try:

        def all_done(updates: list[JobStatusUpdate]) -> bool:
            return sum(p.finished for p in _final_phases(updates).values()) >= 200

        updates = await _wait_until(kafka_settings, topics, all_done, 180)
        final = _final_phases(updates)
        logs = restarted.log()[-3000:]
        assert len(final) == 200, logs
        assert set(final.values()) == {JobPhase.SUCCEEDED}, logs
        runs: dict[str, set[tuple[str | None, int]]] = defaultdict(set)
        for update in updates:
            if update.phase in (JobPhase.CREATED, JobPhase.RUNNING, JobPhase.SUCCEEDED):
                runs[update.uid].add((update.cluster, update.attempt))
        assert all(len(r) == 1 for r in runs.values()), {
            u: r for u, r in runs.items() if len(r) > 1
        }
        assert {attempt for r in runs.values() for _, attempt in r} == {1}
    finally:
        for process in (restarted, *workers):
            assert process.terminate() in (0, -15), process.log()[-2000:]


async def test_status_command_and_submit_watch(
    kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    common = _common(kafka_settings, topics)
    hub = Process("hub", ["hub", *common], tmp_path)
    worker = Process(
        "worker",
        ["worker", *common, "--cluster", "solo", "--backend", "sim", "--heartbeat-interval", "0.5"],
        tmp_path,
    )
    try:
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(jax_job("watched", workers=2, duration="0.5s")))
        watched = await cli("submit", str(job_file), "--watch", *common, timeout=120)
        assert watched.returncode == 0, watched.stdout + watched.stderr + hub.log()
        for phase in ("Queued", "Assigned", "Created", "Running", "Succeeded"):
            assert phase in watched.stdout
        shown = await cli("status", "default/watched", "-o", "json", *common, timeout=60)
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)
        assert status["phase"] == "Succeeded" and status["cluster"] == "solo"
        assert datetime.fromisoformat(status["published"]).tzinfo is not None
        as_yaml = await cli("status", "default/watched", "-o", "yaml", *common, timeout=60)
        assert yaml.safe_load(as_yaml.stdout) == status
        # Submitted again: refused, and the exit code says nothing ran, whatever the old job
        # did; the refusal does not become the job's status.
        again = await cli("submit", str(job_file), "--watch", *common, timeout=120)
        assert again.returncode == 1, again.stdout + again.stderr
        assert "already exists" in again.stdout
        shown = await cli("status", "default/watched", "-o", "json", *common, timeout=60)
        assert json.loads(shown.stdout)["reason"] == "JAXJobSucceeded", shown.stdout
        noop = await cli("suspend", "default/watched", *common, timeout=60)
        assert noop.returncode == 0 and "nothing to do" in noop.stdout, noop.stdout
        refused = await cli("update", str(job_file), *common, timeout=60)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "a finished job cannot be updated" in refused.stderr
        await _update_a_held_job(common, tmp_path)
        # Invalid for the hub, unchecked here: the watcher sees the rejection and stops.
        invalid = tmp_path / "invalid.yaml"
        broken = jax_job("broken")
        container = broken["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        del container["image"]
        invalid.write_text(yaml.safe_dump(broken))
        rejected = await cli(
            "submit", str(invalid), "--no-validate", "--watch", *common, timeout=120
        )
        assert rejected.returncode == 1 and "Rejected" in rejected.stdout, rejected.stdout
        failing = tmp_path / "failing.yaml"
        failing.write_text(yaml.safe_dump(jax_job("failing", workers=1, exit_code="4")))
        failed = await cli("submit", str(failing), "--watch", *common, timeout=120)
        assert failed.returncode == 1 and "Failed" in failed.stdout
    finally:
        assert hub.terminate() in (0, -15), hub.log()[-2000:]
        assert worker.terminate() in (0, -15), worker.log()[-2000:]


async def _update_a_held_job(common: list[str], tmp_path: Path) -> None:
    """`trainhub update`: a job held suspended takes a new spec, and runs it once the update
    says suspend: false."""
    held = jax_job("held", workers=1, duration="0.3s")
    held["spec"]["runPolicy"]["suspend"] = True
    held_file = tmp_path / "held.yaml"
    held_file.write_text(yaml.safe_dump(held))
    assert (await cli("submit", str(held_file), *common, timeout=60)).returncode == 0
    await _status_until(common, "default/held", "Suspended")
    released = jax_job("held", workers=2, duration="0.3s")
    released["spec"]["runPolicy"]["suspend"] = False
    held_file.write_text(yaml.safe_dump(released))
    updated = await cli("update", str(held_file), *common, timeout=60)
    assert updated.returncode == 0 and "update sent" in updated.stdout, updated.stderr
    status = await _status_until(common, "default/held", "Succeeded")
    assert status["cluster"] == "solo"
    assert status["status"]["replicaStatuses"]["Worker"]["succeeded"] == 2


async def _status_until(common: list[str], job: str, phase: str) -> dict[str, Any]:
    for _ in range(40):
        shown = await cli("status", job, "-o", "json", *common, timeout=60)
        if shown.returncode == 0 and json.loads(shown.stdout)["phase"] == phase:
            found: dict[str, Any] = json.loads(shown.stdout)
            return found
        await asyncio.sleep(0.5)
    raise AssertionError(f"{job} never {phase}: {shown.stdout}{shown.stderr}")


async def test_up_on_a_broker_with_history_reports_only_its_own_runs(
    kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    common = [*_common(kafka_settings, topics), "--backend", "sim", "--no-live"]
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(jax_job("twice", workers=1, duration="0.3s")))
    first = await cli("up", *common, "--exit-on-finish", str(job_file), timeout=120)
    assert first.returncode == 0 and "all jobs succeeded" in first.stdout, first.stdout
    # The job exists now: the second call's submission is refused, which is no success,
    # and the first run's Succeeded is not reported as this call's.
    second = await cli("up", *common, "--exit-on-finish", str(job_file), timeout=120)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "already exists" in second.stdout and "some jobs did not succeed" in second.stdout


async def test_retire_cluster_command(
    kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    common = _common(kafka_settings, topics)
    # Readers see the heartbeats the hub passed on (only hubs write the clusters topic).
    hub = Process("hub", ["hub", *common], tmp_path)
    ghost = sim_worker("ghost", common, tmp_path, heartbeat_interval=0.5)
    steady = sim_worker("steady", common, tmp_path, heartbeat_interval=0.5)

    async def listed() -> set[str]:
        shown = await cli("get", "clusters", "-o", "json", *common, timeout=60)
        if shown.returncode == 2 and "no trainhub topics with prefix" in shown.stderr:
            return set()  # the workers have not created the topics yet
        assert shown.returncode == 0, shown.stderr
        return {c["name"] for c in json.loads(shown.stdout)}

    try:
        deadline = time.monotonic() + 60
        while await listed() != {"ghost", "steady"}:
            assert time.monotonic() < deadline, ghost.log()[-2000:] + hub.log()[-2000:]
            await asyncio.sleep(0.5)
        alive = await cli("retire-cluster", "ghost", *common, "--max-heartbeat-age", "3")
        assert alive.returncode == 1 and "stop its worker first" in alive.stderr, alive.stderr
        ghost.kill()
        await asyncio.sleep(4)  # its last heartbeat is now older than 3 s
        retired = await cli("retire-cluster", "ghost", *common, "--max-heartbeat-age", "3")
        assert retired.returncode == 0, retired.stderr
        assert "retired cluster ghost" in retired.stdout
        assert await listed() == {"steady"}
        unknown = await cli("retire-cluster", "ghost", *common)
        assert unknown.returncode == 1 and "known: steady" in unknown.stderr, unknown.stderr
    finally:
        ghost.terminate()
        assert steady.terminate() in (0, -15), steady.log()[-2000:]
        assert hub.terminate() in (0, -15), hub.log()[-2000:]
