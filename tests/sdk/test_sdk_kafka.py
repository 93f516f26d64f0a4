"""The blocking SDK and the read commands of the CLI against a real broker, with the hub and
a `local` worker running as separate processes, as they are deployed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient
from typer.testing import CliRunner, Result

from schemas.status import JobPhase
from tests.cli import run_trainhub
from tests.kafka.processes import Process
from tests.kafka_target import KafkaTarget
from trainhub import (
    ClientClosedError,
    JobFailedError,
    JobNotFoundError,
    StatusEvent,
    TrainHubClient,
    TrainHubJob,
)
from trainhub.cli import app

pytestmark = pytest.mark.kafka


@dataclass
class Deployment:
    bootstrap: str
    prefix: str
    hub: Process
    worker: Process

    @property
    def flags(self) -> list[str]:
        return ["--bootstrap", self.bootstrap, "--topic-prefix", self.prefix]

    def client(self) -> TrainHubClient:
        return TrainHubClient(self.bootstrap, self.prefix)

    def cli(self, *args: str) -> Result:
        """The command in this process (saves starting Python each time)."""
        return CliRunner().invoke(app, [*args, *self.flags])

    def process(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The command as a user runs it."""
        return run_trainhub(*args, *self.flags, timeout=timeout)

    def logs(self) -> str:
        return self.hub.log()[-3000:] + self.worker.log()[-3000:]


@pytest.fixture(scope="module")
def deployment(
    kafka: KafkaTarget, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    logs = tmp_path_factory.mktemp("sdk-deployment")
    prefix = f"sdk{uuid.uuid4().hex[:10]}"
    common = [
        "--bootstrap",
        kafka.bootstrap,
        "--topic-prefix",
        prefix,
    ]
    hub = Process("hub", ["hub", *common], logs)
    worker = Process(
        "worker",
        [
            "worker",
            *common,
            "--heartbeat-interval",
            "0.5",
            "--cluster",
            "solo",
            "--backend",
            "local",
            "--capacity",
            "cpu=4,memory=8Gi",
            "--logs-dir",
            str(logs / "pods"),
        ],
        logs,
    )
    try:
        yield Deployment(kafka.bootstrap, prefix, hub, worker)
    finally:
        assert hub.terminate() in (0, -15), hub.log()[-2000:]
        assert worker.terminate() in (0, -15), worker.log()[-2000:]


def greet(greeting: str, count: int) -> None:
    for i in range(count):
        print(f"{greeting} {i}")


def crash() -> None:
    print("about to fail")
    raise RuntimeError("boom from the train function")


def tick(count: int, pause: float) -> None:
    import time

    for i in range(count):
        print(f"tick {i}", flush=True)
        time.sleep(pause)


def _until_deleted(client: TrainHubClient, name: str) -> None:
    for _ in range(200):
        if client.get_job(name).phase == JobPhase.DELETED:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} was never deleted")


def test_function_job_runs_waits_logs_and_deletes(deployment: Deployment) -> None:
    with deployment.client() as client:
        uid = client.create_job(
            train_func=greet,
            name="hello",
            parameters={"greeting": "hi from trainhub", "count": 3},
            resources_per_worker={"cpu": "500m", "memory": "256Mi"},
        )
        job = client.wait_for_job_conditions("hello", timeout=120)
        assert job.uid == uid and job.cluster == "solo", deployment.logs()
        assert client.is_job_succeeded("hello") and not client.is_job_failed("hello")
        assert {c.type for c in client.get_job_conditions("hello")} >= {"Created", "Succeeded"}
        expected = "".join(f"hi from trainhub {i}\n" for i in range(3))
        assert client.get_job_logs("hello") == {"hello-master-0": expected}

        listed = deployment.process("get", "jobs", "-o", "json")
        assert listed.returncode == 0, listed.stderr
        items = json.loads(listed.stdout)["items"]
        (row,) = [j for j in items if j["metadata"]["name"] == "hello"]
        assert row["status"]["trainhub"]["phase"] == "Succeeded"
        assert row["status"]["trainhub"]["cluster"] == "solo" and row["metadata"]["uid"] == uid
        assert row["kind"] == "PyTorchJob" and "pytorchReplicaSpecs" in row["spec"]
        as_yaml = deployment.cli("get", "jobs", "-o", "yaml")
        assert as_yaml.exit_code == 0
        assert yaml.safe_load(as_yaml.stdout)["items"][0]["metadata"]["uid"] == uid
        wide = deployment.cli("get", "jobs", "-o", "wide")
        assert wide.exit_code == 0, wide.stderr
        assert "NAMESPACE" in wide.stdout and "UID" in wide.stdout
        line = next(x for x in wide.stdout.splitlines() if " hello " in x)
        for cell in ("default", "PyTorchJob", "Succeeded", "solo", uid):
            assert cell in line, wide.stdout

        clusters = deployment.cli("get", "clusters", "-o", "json")
        assert clusters.exit_code == 0, clusters.stderr
        (solo,) = json.loads(clusters.stdout)
        assert solo["name"] == "solo" and solo["healthy"] is True and solo["nodes"] == 1
        assert solo["resources"]["cpu"]["allocatable"] == "4"
        assert solo["resources"]["memory"]["allocatable"] == "8Gi"
        table = deployment.cli("get", "clusters")
        assert "solo" in table.stdout and "yes" in table.stdout and "4/4" in table.stdout

        described = deployment.cli("describe", "job", "hello")
        assert described.exit_code == 0, described.stderr
        for text in (
            "default/hello",
            "PyTorchJob (pytorch)",
            "greet (python -u)",
            "solo (attempt 1)",
            "replicas",
            "Master",
            "pytorch/pytorch:2.1.2",
            "placement",
            "solo (chosen)",
            "conditions",
            "Succeeded",
            "events",
            "Queued",
            "hub",
            "worker/solo",
        ):
            assert text in described.stdout, described.stdout
        as_json = deployment.cli("describe", "job", "default/hello", "-o", "json")
        assert json.loads(as_json.stdout)["placement"]["chosen"] == "solo"

        printed = deployment.process("logs", "hello")
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout == expected
        prefixed = deployment.cli("logs", "hello", "--prefix", "--tail", "1")
        assert prefixed.stdout == "[hello-master-0] hi from trainhub 2\n"

        missing = deployment.process("describe", "job", "nope")
        assert missing.returncode == 3 and "nope" in missing.stderr
        assert deployment.cli("logs", "nope").exit_code == 3

        client.delete_job("hello")
        _until_deleted(client, "hello")
        gone = deployment.cli("logs", "hello")
        assert gone.exit_code == 1
        assert "job default/hello is Deleted: its pods are gone" in gone.output, gone.output
        remaining = deployment.cli("get", "jobs", "-o", "json")
        assert remaining.exit_code == 0 and "hello" not in [
            j["metadata"]["name"] for j in json.loads(remaining.stdout)["items"]
        ]


def test_failing_function_raises_and_logs_follow(deployment: Deployment) -> None:
    with deployment.client() as client:
        client.create_job(train_func=crash, name="crash", backoff_limit=0)
        with pytest.raises(JobFailedError, match="Failed") as failed:
            client.wait_for_job_conditions("crash", timeout=120)
        assert failed.value.job.phase == JobPhase.FAILED, deployment.logs()
        assert client.is_job_failed("crash")
        text = client.get_job_logs("crash")["crash-master-0"]
        assert "about to fail" in text and "RuntimeError: boom from the train function" in text

        client.create_job(train_func=tick, name="ticks", parameters={"count": 6, "pause": 0.4})
        arrived: list[float] = []
        chunks = []
        for chunk in client.stream_job_logs("ticks", timeout=120):
            arrived.append(time.monotonic())
            chunks.append(chunk)
        assert "".join(c.text for c in chunks) == "".join(f"tick {i}\n" for i in range(6))
        assert len(chunks) >= 2 and arrived[-1] - arrived[0] > 0.5, "text must come as written"
        assert client.get_job("ticks").phase == JobPhase.SUCCEEDED

        followed = deployment.process("logs", "ticks", "-f", "--timeout", "60")
        assert followed.returncode == 0, followed.stderr
        assert followed.stdout == "".join(f"tick {i}\n" for i in range(6))


def test_status_stream_resumes_after_the_client_restarts(
    deployment: Deployment, tmp_path: Path
) -> None:
    saved = tmp_path / "positions.json"
    handled: list[StatusEvent] = []
    with deployment.client() as first:
        first.create_job(
            train_func=greet,
            name="p-one",
            parameters={"greeting": "a", "count": 1},
            queue="pipeline",
        )
        positions: dict[int, int] = {}
        for event in first.stream(queue="pipeline"):
            handled.append(event)
            positions[event.partition] = event.offset
            saved.write_text(json.dumps(positions))
            if event.phase == JobPhase.RUNNING:
                break  # the pipeline stops here; p-one still has events to come
    before_two = time.time()
    with deployment.client() as other:
        other.create_job(
            train_func=greet,
            name="p-two",
            parameters={"greeting": "b", "count": 1},
            queue="pipeline",
        )
        other.create_job(
            train_func=greet, name="not-ours", parameters={"greeting": "c", "count": 1}
        )
    resumed: list[StatusEvent] = []
    with deployment.client() as second:
        finished: set[str] = set()
        for event in second.stream(queue="pipeline", from_offset=json.loads(saved.read_text())):
            resumed.append(event)
            if event.phase.finished:
                finished.add(event.update.name or event.uid)
            if finished == {"p-one", "p-two"}:
                break
        everything = list(second.stream(queue="pipeline", follow=False))
        since = list(second.stream(queue="pipeline", from_time=before_two, follow=False))
        queued = {j.name for j in second.list_jobs(queue="pipeline")}
    seen = [e.position for e in handled + resumed]
    assert len(seen) == len(set(seen)), "an event was delivered twice"
    assert set(seen) == {e.position for e in everything}, "an event was lost"
    assert {e.update.name for e in everything} == {"p-one", "p-two"}
    assert [e.phase for e in resumed if e.update.name == "p-one"][-1] == JobPhase.SUCCEEDED
    two = {e.position for e in everything if e.update.name == "p-two"}
    assert two <= {e.position for e in since}
    assert not any(e.update.name == "p-one" and e.phase == JobPhase.QUEUED for e in since)
    assert queued == {"p-one", "p-two"}
    listed = deployment.cli("get", "jobs", "--queue", "pipeline", "-o", "json")
    names = [j["metadata"]["name"] for j in json.loads(listed.stdout)["items"]]
    assert sorted(names) == ["p-one", "p-two"]


def test_the_blocking_clients_threads_callbacks_and_close(deployment: Deployment) -> None:
    client = deployment.client()
    client.create_job(train_func=tick, name="slow", parameters={"count": 20, "pause": 0.5})
    # The callback runs in the caller's thread, as upstream's: it may use the client.
    seen: list[tuple[str, list[str]]] = []

    def note(job: TrainHubJob) -> None:
        assert job.name is not None
        seen.append((threading.current_thread().name, client.get_job_pod_names(job.name)))

    client.wait_for_job_conditions("slow", expected_conditions={"Running"}, callback=note)
    assert seen and {thread for thread, _ in seen} == {threading.current_thread().name}
    assert seen[-1][1] == ["slow-master-0"]
    # Closing ends the calls other threads are blocked in, instead of leaving them for ever.
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            client.wait_for_job_conditions("slow", timeout=60)
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(1)
    client.close()
    waiter.join(10)
    assert not waiter.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ClientClosedError), outcome
    with pytest.raises(ClientClosedError, match="closed"):
        client.list_jobs()
    client.close()  # twice is harmless
    with deployment.client() as again:
        again.delete_job("slow")


def test_reading_commands_with_a_mistyped_prefix_fail_and_create_no_topics(
    kafka: KafkaTarget,
) -> None:
    prefix = f"typo{uuid.uuid4().hex[:8]}"
    flags = ["--bootstrap", kafka.bootstrap, "--topic-prefix", prefix]
    for command in (["get", "jobs"], ["get", "clusters"], ["describe", "job", "x"]):
        result = CliRunner().invoke(app, [*command, *flags])
        assert result.exit_code == 2, (command, result.output)
        assert f"topic '{prefix}.status' does not exist" in result.output, result.output
        assert f"no trainhub topics with prefix '{prefix}' on this broker yet" in result.output

    async def topics() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        await admin.start()
        try:
            return [t for t in await admin.list_topics() if t.startswith(prefix)]
        finally:
            await admin.close()

    assert asyncio.run(topics()) == []


def test_a_job_not_found_is_named_with_the_namespace_looked_in(deployment: Deployment) -> None:
    # The client first: it creates the topics, should the hub not have started yet.
    with deployment.client() as client, pytest.raises(JobNotFoundError) as missing:
        client.get_job("nosuch", "team-a")
    assert "no job 'team-a/nosuch' (nor of uid 'nosuch')" in str(missing.value)
    bare = deployment.cli("status", "nosuch")
    assert bare.exit_code == 3
    assert "no status for job 'default/nosuch' (nor of uid 'nosuch')" in bare.output
    other = deployment.cli("status", "nosuch", "-n", "team-b")
    assert other.exit_code == 3 and "'team-b/nosuch'" in other.output, other.output
    deleted = deployment.cli("delete", "nosuch")
    assert deleted.exit_code == 3 and "no job 'default/nosuch'" in deleted.output
