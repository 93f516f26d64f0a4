"""Where the Kafka tests find a real broker.

1. `KAFKA_BOOTSTRAP_SERVERS` set: that broker (PLAINTEXT; SCRAM tests need
   `KAFKA_SASL_BOOTSTRAP`, `KAFKA_SASL_USERNAME`, `KAFKA_SASL_PASSWORD` too).
2. A Docker engine answering and testcontainers installed: testcontainers' Kafka.
3. Otherwise: the sandbox broker from Maven Central jars (what CI on this machine uses).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class KafkaTarget:
    bootstrap: str
    sasl_bootstrap: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    origin: str = "sandbox"


def _docker_answers() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        return subprocess.run([docker, "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextmanager
def _testcontainers_kafka() -> Iterator[KafkaTarget]:
    from testcontainers.kafka import KafkaContainer

    with KafkaContainer() as container:
        yield KafkaTarget(container.get_bootstrap_server(), origin="testcontainers")


@contextmanager
def kafka_target(workdir: Path) -> Iterator[KafkaTarget]:
    given = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if given:
        yield KafkaTarget(
            given,
            os.environ.get("KAFKA_SASL_BOOTSTRAP"),
            os.environ.get("KAFKA_SASL_USERNAME"),
            os.environ.get("KAFKA_SASL_PASSWORD"),
            origin="environment",
        )
        return
    if _docker_answers():
        try:
            import testcontainers.kafka  # noqa: F401
        except ImportError:
            pass
        else:
            with _testcontainers_kafka() as target:
                yield target
            return
    from trainhub_sandbox.kafka_broker import start_kafka, stop_kafka

    broker = start_kafka(workdir, scram_users={"trainhub": "trainhub-secret"})
    try:
        yield KafkaTarget(
            broker.bootstrap,
            broker.sasl_bootstrap,
            broker.scram_username,
            broker.scram_password,
        )
    finally:
        stop_kafka(broker)
