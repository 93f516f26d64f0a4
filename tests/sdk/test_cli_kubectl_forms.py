"""kubectl habits on a real broker and hub: `get job NAME`, `get jobs NAME...`, per-kind
resource names, `-l` selectors, `-o json` as a `List` with `items`, `-o name`, `get -w`, and
`delete -f FILE`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from tests.helpers import cluster, jax_job, node, publish_heartbeat
from tests.kafka.processes import Process
from tests.kafka_target import KafkaTarget
from trainhub.cli import app
from trainhub.cli_get_jobs import parse_selector


def _job(kind: str, name: str, **labels: str) -> dict[str, Any]:
    document = jax_job(name)
    document["kind"] = kind
    specs = document["spec"].pop("jaxReplicaSpecs")
    [spec] = specs.values()
    key = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs"}[kind]
    rtype = {"PyTorchJob": "Master", "TFJob": "Chief"}[kind]
    spec["replicas"] = 1
    spec["template"]["spec"]["containers"][0]["name"] = {
        "PyTorchJob": "pytorch",
        "TFJob": "tensorflow",
    }[kind]
    document["spec"][key] = {rtype: spec}
    document["spec"].setdefault("runPolicy", {})["suspend"] = True  # held: no worker needed
    document["metadata"]["labels"] = labels
    return document


class Fleet:
    def __init__(self, bootstrap: str, prefix: str, folder: Path) -> None:
        self.prefix = prefix
        self.flags = ["--bootstrap", bootstrap, "--topic-prefix", prefix]
        self.folder = folder

    def cli(self, *args: str, stdin: str | None = None) -> Result:
        return CliRunner().invoke(app, [*args, *self.flags], input=stdin)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "trainhub", *args, *self.flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def file(self, name: str, *documents: dict[str, Any]) -> Path:
        path = self.folder / name
        path.write_text(yaml.safe_dump_all(documents))
        return path


@pytest.fixture(scope="module")
def fleet(kafka: KafkaTarget, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("kubectl-forms")
    prefix = f"kc{uuid.uuid4().hex[:10]}"
    hub = Process("hub", ["hub", "--bootstrap", kafka.bootstrap, "--topic-prefix", prefix], folder)
    try:
        fleet = Fleet(kafka.bootstrap, prefix, folder)
        jobs = fleet.file(
            "jobs.yaml",
            _job("PyTorchJob", "vision-a", team="vision"),
            _job("PyTorchJob", "nlp-b", team="nlp"),
            _job("TFJob", "tf-c", team="vision"),
        )
        submitted = fleet.cli("submit", str(jobs))
        assert submitted.exit_code == 0, submitted.output
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            names = fleet.cli("get", "jobs", "-o", "name").stdout.split()
            if len(names) == 3:
                break
            time.sleep(0.5)
        yield fleet
    finally:
        assert hub.terminate() in (0, -15), hub.log()[-2000:]


def test_get_jobs_json_is_a_list_of_job_objects(fleet: Fleet) -> None:
    listed = fleet.cli("get", "jobs", "-o", "json")
    assert listed.exit_code == 0, listed.output
    document = json.loads(listed.stdout)
    assert document["kind"] == "List" and document["apiVersion"] == "v1"
    items = {i["metadata"]["name"]: i for i in document["items"]}
    assert sorted(items) == ["nlp-b", "tf-c", "vision-a"]
    vision = items["vision-a"]
    assert vision["apiVersion"] == "kubeflow.org/v1" and vision["kind"] == "PyTorchJob"
    assert vision["metadata"]["labels"] == {"team": "vision"} and vision["metadata"]["uid"]
    assert vision["status"]["trainhub"]["phase"] == "Suspended"
    assert "pytorchReplicaSpecs" in vision["spec"]


def test_one_name_gives_the_object_and_several_names_a_table(fleet: Fleet) -> None:
    one = fleet.cli("get", "job", "vision-a", "-o", "yaml")
    assert one.exit_code == 0, one.output
    job = yaml.safe_load(one.stdout)
    assert job["kind"] == "PyTorchJob" and job["metadata"]["name"] == "vision-a"
    two = fleet.cli("get", "jobs", "vision-a", "default/tf-c")
    assert two.exit_code == 0, two.output
    assert "vision-a" in two.stdout and "tf-c" in two.stdout and "nlp-b" not in two.stdout
    missing = fleet.cli("get", "job", "nobody")
    assert missing.exit_code == 3 and "no job 'default/nobody'" in missing.output


def test_per_kind_resource_names_and_name_output(fleet: Fleet) -> None:
    torch = fleet.cli("get", "pytorchjobs", "-o", "name")
    assert torch.exit_code == 0, torch.output
    assert sorted(torch.stdout.split()) == [
        "pytorchjob.kubeflow.org/nlp-b",
        "pytorchjob.kubeflow.org/vision-a",
    ]
    assert fleet.cli("get", "tfjob", "-o", "name").stdout.split() == ["tfjob.kubeflow.org/tf-c"]
    wrong = fleet.cli("get", "tfjobs", "vision-a")
    assert wrong.exit_code == 3 and "is a PyTorchJob, not a TFJob" in wrong.output
    assert fleet.cli("get", "mpijobs").stdout.strip() == ""


def test_label_selectors(fleet: Fleet) -> None:
    vision = fleet.cli("get", "jobs", "-l", "team=vision", "-o", "name")
    assert sorted(vision.stdout.split()) == [
        "pytorchjob.kubeflow.org/vision-a",
        "tfjob.kubeflow.org/tf-c",
    ]
    both = fleet.cli("get", "pytorchjobs", "-l", "team in (vision,nlp),team!=nlp", "-o", "name")
    assert both.stdout.split() == ["pytorchjob.kubeflow.org/vision-a"]
    assert fleet.cli("get", "jobs", "-l", "!team", "-o", "name").stdout.strip() == ""
    bad = fleet.cli("get", "jobs", "-l", "team=(x")
    assert bad.exit_code == 2 and "invalid label selector" in bad.output


def test_selector_syntax() -> None:
    [match] = parse_selector("tier")
    assert match({"tier": ""}) and not match({})
    checks = parse_selector("a=1, b notin (x, y),!c")
    assert all(c({"a": "1", "b": "z"}) for c in checks)
    assert not all(c({"a": "1", "b": "x"}) for c in checks)


def test_plan_reads_the_live_fleet(fleet: Fleet, kafka: KafkaTarget) -> None:
    path = fleet.file("plan.yaml", _job("PyTorchJob", "planned"))
    path.write_text(path.read_text().replace("suspend: true", "suspend: false"))
    empty = fleet.cli("plan", str(path))
    assert empty.exit_code == 1 and "no member cluster reports" in empty.output, empty.output

    async def heartbeat() -> None:
        bus = KafkaBus(KafkaSettings(bootstrap=kafka.bootstrap))
        await bus.start()
        try:
            roomy = cluster("east", node("n1", cpu="64", memory="256Gi", pods="110"))
            await publish_heartbeat(bus, Topics(prefix=fleet.prefix), roomy)
        finally:
            await bus.close()

    asyncio.run(heartbeat())
    deadline = time.monotonic() + 30
    while "east" not in fleet.cli("get", "clusters").stdout and time.monotonic() < deadline:
        time.sleep(0.5)
    planned = fleet.cli("plan", str(path), "-o", "json")
    assert planned.exit_code == 0, planned.output
    assert json.loads(planned.stdout)["chosen"] == "east"
    no_bus = CliRunner().invoke(app, ["plan", str(path)])
    assert no_bus.exit_code == 2 and "--clusters FILE, or --bootstrap" in no_bus.output


def test_watch_prints_changes_and_delete_takes_a_file(fleet: Fleet) -> None:
    watcher = fleet.popen("get", "jobs", "-w", "--watch-timeout", "25")
    try:
        time.sleep(8)  # the list first, then the stream from now
        path = fleet.file("nlp.yaml", _job("PyTorchJob", "nlp-b", team="nlp"))
        deleted = fleet.cli("delete", "-f", str(path))
        assert deleted.exit_code == 0, deleted.output
        assert "delete requested for default/nlp-b" in deleted.stdout
        stdout, stderr = watcher.communicate(timeout=60)
    finally:
        watcher.kill()
    lines = stdout.splitlines()
    assert lines[0].split()[:2] == ["NAMESPACE", "NAME"], stdout + stderr
    assert any("nlp-b" in line and "Deleted" in line for line in lines[1:]), stdout + stderr
    gone = fleet.cli("get", "jobs", "-o", "name").stdout.split()
    assert "pytorchjob.kubeflow.org/nlp-b" not in gone
    empty = fleet.cli("delete")
    assert empty.exit_code == 2 and "JOB arguments or -f FILE" in empty.output
