"""Fixtures shared by the tests against the real broker."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from trainhub_sandbox.kafka_cluster import KafkaCluster, start_kafka_cluster, stop_kafka_cluster


@pytest.fixture
async def bus(kafka_settings: KafkaSettings) -> AsyncIterator[KafkaBus]:
    """A started Kafka bus on the test run's broker, closed afterwards."""
    kafka = KafkaBus(kafka_settings)
    await kafka.start()
    yield kafka
    await kafka.close()


@dataclass
class ClusterHolder:
    """The run's three-broker cluster; `current` changes as tests kill and restart nodes."""

    current: KafkaCluster


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHolder]:
    """Three sandbox KRaft brokers of one cluster, started on first use and stopped at the
    end of the run: always the sandbox's own, since the tests that use it kill its nodes."""
    if shutil.which("java") is None:
        pytest.skip("a three-broker cluster needs the sandbox broker (Java 17+ on PATH)")
    holder = ClusterHolder(start_kafka_cluster(tmp_path_factory.mktemp("kafka-cluster"), 3))
    try:
        yield holder
    finally:
        stop_kafka_cluster(holder.current)
