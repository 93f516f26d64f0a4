"""Session fixtures for the real parts: one Kafka broker per test run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from schemas.trainer_runtimes import RUNTIMES_ENV, reset_runtime_catalog
from tests.kafka_target import KafkaTarget, kafka_target

pytest_plugins = ["tests.stop_on_sigterm"]


@pytest.fixture(autouse=True)
def _own_runtime_catalog(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Operators' runtimes one test loads stay out of the next test's catalog."""
    monkeypatch.delenv(RUNTIMES_ENV, raising=False)
    reset_runtime_catalog()
    yield
    reset_runtime_catalog()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTarget]:
    """A real Kafka broker, started once per run (see tests/kafka_target.py)."""
    with kafka_target(Path(tmp_path_factory.mktemp("kafka"))) as target:
        yield target


@pytest.fixture
def kafka_settings(kafka: KafkaTarget) -> KafkaSettings:
    return KafkaSettings(bootstrap=kafka.bootstrap)


@pytest.fixture
def topics() -> Topics:
    """Topics of their own for each test, so tests sharing the broker never meet."""
    return Topics(prefix=f"t{uuid.uuid4().hex[:10]}")
