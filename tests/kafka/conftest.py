"""Fixtures shared by the tests against the real broker."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings


@pytest.fixture
async def bus(kafka_settings: KafkaSettings) -> AsyncIterator[KafkaBus]:
    """A started Kafka bus on the test run's broker, closed afterwards."""
    kafka = KafkaBus(kafka_settings)
    await kafka.start()
    yield kafka
    await kafka.close()
