"""The event contract from outside: producers that do not import trainhub (plain aiokafka, and
Kafka's own console producer) submit and delete jobs on a real broker, as docs/events.md says."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bus.dead_letters import dead_letter_reason
from bus.kafka import KafkaBus
from bus.reading import records_to_end
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.events import EventType
from schemas.status import JobPhase
from tests.helpers import jax_job
from trainhub.producer import follow_status

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "raw-producer"
_STANDARD_AND_KAFKA = {"aiokafka", "yaml", *sys.stdlib_module_names}


def test_the_aiokafka_example_imports_nothing_of_trainhub() -> None:
    tree = ast.parse((EXAMPLE / "produce.py").read_text())
    imported = {
        (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= _STANDARD_AND_KAFKA, imported - _STANDARD_AND_KAFKA


@pytest.fixture
async def hub(bus: KafkaBus, topics: Topics) -> AsyncIterator[Hub]:
    started = Hub(bus, topics, HubConfig(schedule_interval=0.1))
    await asyncio.wait_for(started.start(), timeout=60)
    try:
        yield started
    finally:
        await started.stop()


async def _phase(bus: KafkaBus, topics: Topics, uid: str, phase: JobPhase) -> None:
    async with asyncio.timeout(30):
        async for update in follow_status(bus, topics, [uid]):
            if update.phase == phase:
                return


async def _run(*command: str, env: dict[str, str] | None = None) -> str:
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, stderr.decode()[-3000:]
    return stdout.decode().strip().splitlines()[-1]


async def test_plain_aiokafka_submits_deletes_and_is_told_of_an_unknown_uid(
    bus: KafkaBus, topics: Topics, hub: Hub, tmp_path: Path
) -> None:
    bootstrap = bus.settings.bootstrap
    job = tmp_path / "job.json"
    job.write_text(json.dumps(jax_job("raw-aiokafka")))
    produce = [sys.executable, str(EXAMPLE / "produce.py"), "--bootstrap", bootstrap]
    produce += ["--prefix", topics.prefix]
    uid = await _run(*produce, "submit", str(job))
    await _phase(bus, topics, uid, JobPhase.QUEUED)
    assert await _run(*produce, "delete", "default/raw-aiokafka") == uid
    await _phase(bus, topics, uid, JobPhase.DELETED)

    unknown = await _run(*produce, "delete", "default/never-submitted")
    async with asyncio.timeout(30):
        while True:
            reasons = [
                dead_letter_reason(r) or "" async for r in records_to_end(bus, topics.dead_letters)
            ]
            if reasons:
                break
            await asyncio.sleep(0.2)
    [reason] = reasons
    assert f"invalid {EventType.JOB_DELETED}: no job with uid {unknown!r}" in reason


def _console_producer(tmp_path: Path) -> Path:
    """A `kafka-console-producer.sh` over the sandbox broker's jars and kafka-tools."""
    if shutil.which("java") is None:
        pytest.skip("the console producer needs Java 17+ on PATH")
    from trainhub_sandbox.kafka_broker import (
        DEPENDENCY_PLUGIN,
        kafka_version,
        resolve_kafka_classpath,
    )

    lib = resolve_kafka_classpath()
    tools = lib.parent / "tools"
    jar = tools / f"kafka-tools-{kafka_version()}.jar"
    if not jar.is_file():
        subprocess.run(
            [
                "mvn",
                "-B",
                "-q",
                f"{DEPENDENCY_PLUGIN}:copy",
                f"-Dartifact=org.apache.kafka:kafka-tools:{kafka_version()}",
                f"-DoutputDirectory={tools}",
            ],
            check=True,
            cwd=tmp_path,
            timeout=600,
        )
    script = tmp_path / "kafka-console-producer.sh"
    script.write_text(
        "#!/bin/sh\nexec java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
        f'-cp "{lib}/*:{jar}" org.apache.kafka.tools.ConsoleProducer "$@"\n'
    )
    script.chmod(0o755)
    return script


async def test_kafkas_console_producer_submits_and_deletes_a_job(
    bus: KafkaBus, topics: Topics, hub: Hub, tmp_path: Path
) -> None:
    tool = _console_producer(tmp_path)
    job = tmp_path / "job.json"
    job.write_text(json.dumps(jax_job("raw-console")))
    env = {"KAFKA_CONSOLE_PRODUCER": str(tool), "TRAINHUB_PREFIX": topics.prefix}
    script = str(EXAMPLE / "console-producer.sh")
    bootstrap = bus.settings.bootstrap
    uid = await _run(script, bootstrap, "submit", str(job), env=env)
    await _phase(bus, topics, uid, JobPhase.QUEUED)
    assert hub.ledger.get(uid) is not None
    await _run(script, bootstrap, "delete", uid, env=env)
    await _phase(bus, topics, uid, JobPhase.DELETED)
