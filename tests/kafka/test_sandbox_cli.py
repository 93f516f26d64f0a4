"""`trainhub sandbox up/status/down` as a user runs them: processes outlive the command."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from tests.cli import run_trainhub
from tests.helpers import jax_job
from tests.kafka.processes import Process
from tests.kafka.status_topic import stop_all
from tests.kafka.topic_checks import topics_exist

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`trainhub sandbox ARGS` (building member clusters can take minutes)."""
    return _trainhub("sandbox", *args, env=env, timeout=300)


def _trainhub(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return run_trainhub(*args, env=env, timeout=timeout)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sandbox_up_status_down(tmp_path: Path) -> None:
    env = {**os.environ, "TRAINHUB_SANDBOX_DIR": str(tmp_path / "sandbox")}
    up = _cli("up", "--clusters", "1", env=env)
    try:
        assert up.returncode == 0, up.stderr
        status = _cli("status", "-o", "json", env=env)
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        host, _, port = state["kafka"]["bootstrap"].rpartition(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert [c["name"] for c in state["clusters"]] == ["cluster-1"]
        assert Path(state["clusters"][0]["kubeconfig"]).exists()
        assert state["clusters"][0]["context"]
        assert yaml.safe_load(_cli("status", "-o", "yaml", env=env).stdout) == state
        pid = int(state["kafka"]["pid"])
        assert _alive(pid)
        again = _cli("up", env=env)
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        down = _cli("down", env=env)
    assert down.returncode == 0, down.stderr
    assert "kafka" in down.stdout and "member clusters" in down.stdout
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    assert _cli("status", env=env).returncode == 3


def test_sandbox_up_with_acls_gives_each_role_a_user_that_runs_a_job(tmp_path: Path) -> None:
    """The configs `sandbox up --acls` writes are all a hub, a worker and a producer need:
    a job runs to Succeeded with each as its own user, and the broker refuses the rest."""
    env = {**os.environ, "TRAINHUB_SANDBOX_DIR": str(tmp_path / "sandbox")}
    up = _cli("up", "--acls", "--acl-clusters", "east", env=env)
    processes: list[Process] = []
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(_cli("status", "-o", "json", env=env).stdout)
        users = state["kafka"]["users"]
        assert {u: e["role"] for u, e in users.items()} == {
            "hub": "hub",
            "producer": "producer",
            "worker-east": "worker",
        }
        assert users["worker-east"]["cluster"] == "east"
        configs = {user: Path(entry["config"]) for user, entry in users.items()}
        for path in configs.values():
            assert path.stat().st_mode & 0o777 == 0o600
        # The worker first: it may not create the shared topics, so it waits for the hub
        # to do so instead of failing its first heartbeat.
        worker = Process(
            "worker",
            [
                *("worker", "--config", str(configs["worker-east"]), "--cluster", "east"),
                *("--backend", "sim", "--heartbeat-interval", "0.5"),
            ],
            tmp_path,
        )
        processes.append(worker)
        deadline = time.monotonic() + 60
        while "to be created by the hub" not in worker.log():
            assert worker.popen.poll() is None, worker.log()[-3000:]
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.2)
        hub = Process("hub", ["hub", "--config", str(configs["hub"])], tmp_path)
        processes.append(hub)
        assert asyncio.run(_shared_topics_exist(state["kafka"], 90)), hub.log()[-3000:]
        job = tmp_path / "job.yaml"
        job.write_text(yaml.safe_dump(jax_job("acl", workers=2, duration="0.5s")))
        submit = _trainhub(
            "submit", str(job), "--watch", "--config", str(configs["producer"]), env=env
        )
        logs = "\n".join(p.log()[-2000:] for p in processes)
        assert submit.returncode == 0, submit.stdout + submit.stderr + logs
        assert "Succeeded" in submit.stdout
        # The producer's user may submit and follow, not act as the cluster's worker.
        stolen = Process(
            "thief",
            [
                "worker",
                "--config",
                str(configs["producer"]),
                "--cluster",
                "east",
                "--backend",
                "sim",
            ],
            tmp_path,
        )
        assert stolen.popen.wait(60) != 0
        assert "User:producer" in stolen.log(), stolen.log()[-2000:]
    finally:
        stop_all(processes)
        down = _cli("down", env=env)
    assert down.returncode == 0, down.stderr


async def _shared_topics_exist(kafka: dict[str, str], timeout: float) -> bool:
    """Whether the shared topics appear within `timeout`, asked as the sandbox's admin."""
    admin = KafkaBus(
        KafkaSettings(
            bootstrap=kafka["sasl_bootstrap"],
            security_protocol="SASL_PLAINTEXT",
            sasl_username=kafka["sasl_username"],
            sasl_password=kafka["sasl_password"],
        )
    )
    await admin.start()
    try:
        return await topics_exist(admin, {s.name for s in Topics().shared_specs()}, timeout)
    finally:
        await admin.close()
