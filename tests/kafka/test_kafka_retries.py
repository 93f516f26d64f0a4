"""How the Kafka bus rides out a broker outage, with aiokafka replaced by fakes (no broker)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    LeaderNotAvailableError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
)

from bus.base import BusError
from bus.kafka import KafkaAuthorizationError, KafkaBus
from bus.kafka_settings import KafkaSettings


class _FlakyProducer:
    """Fails the first `failures` calls with `error`, then acknowledges."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0
        self.queued: list[asyncio.Future[Any]] = []

    async def send_and_wait(self, topic: str, value: bytes, **_: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error

        class _Meta:
            partition, offset = 0, 7

        meta = _Meta()
        meta.topic = topic  # type: ignore[attr-defined]
        return meta

    async def send(self, topic: str, value: bytes, **_: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.queued.append(future)
        return future

    async def flush(self) -> None:
        await asyncio.gather(*self.queued, return_exceptions=True)


def _bus(producer: _FlakyProducer, *, outage_timeout_s: float = 30.0) -> KafkaBus:
    bus = KafkaBus(KafkaSettings(bootstrap="127.0.0.1:9", outage_timeout_s=outage_timeout_s))
    bus._producer = producer
    bus._topics.add("t")
    return bus


async def test_publish_waits_through_connection_errors_and_missing_leaders() -> None:
    producer = _FlakyProducer(3, KafkaConnectionError("broker restarting"))
    meta = await _bus(producer).publish("t", b"x")
    assert (meta.topic, meta.offset, producer.calls) == ("t", 7, 4)
    producer = _FlakyProducer(2, LeaderNotAvailableError())
    await _bus(producer).publish("t", b"x")
    assert producer.calls == 3
    # aiokafka's word for metadata no broker answered: a plain KafkaError, not "retriable".
    producer = _FlakyProducer(
        2, KafkaError("Unable to get cluster metadata over all known brokers")
    )
    await _bus(producer).publish("t", b"x")
    assert producer.calls == 3


async def test_an_outage_longer_than_the_budget_fails_the_call() -> None:
    producer = _FlakyProducer(10_000, KafkaConnectionError("gone"))
    with pytest.raises(BusError, match="publishing to t"):
        await _bus(producer, outage_timeout_s=0.5).publish("t", b"x")
    assert 2 <= producer.calls < 10


async def test_refusals_are_not_retried() -> None:
    producer = _FlakyProducer(1, TopicAuthorizationFailedError("t"))
    with pytest.raises(KafkaAuthorizationError, match="refused User:ANONYMOUS publishing to t"):
        await _bus(producer).publish("t", b"x")
    assert producer.calls == 1
    producer = _FlakyProducer(1, SaslAuthenticationFailed())
    with pytest.raises(BusError, match="refused the credentials"):
        await _bus(producer).publish("t", b"x")
    assert producer.calls == 1


async def test_flush_raises_a_queued_record_the_producer_gave_up_on_once() -> None:
    producer = _FlakyProducer(0, KafkaConnectionError())
    bus = _bus(producer)
    await bus.send("t", b"delivered")
    await bus.send("t", b"lost")
    producer.queued[0].set_result(None)
    producer.queued[1].set_exception(LeaderNotAvailableError())
    with pytest.raises(BusError, match=r"delivering 1 queued record\(s\) to t"):
        await bus.flush()
    producer.queued.clear()
    await bus.flush()
