"""LagSampler: consumer lag into a gauge, on the memory bus and on a real broker while the
consumer keeps polling, and never an exception out of a failing subscription."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
from prometheus_client import CollectorRegistry

from bus.base import Bus, BusError, Subscription, TopicSpec
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.memory import MemoryBus, MemorySubscription
from bus.metrics import LagSampler, bus_metrics
from bus.topics import Topics


def _lag(registry: CollectorRegistry, topic: str) -> float | None:
    return registry.get_sample_value(
        "trainhub_bus_consumer_lag", {"component": "test", "topic": topic}
    )


async def _until(check: Callable[[], bool]) -> None:
    while True:
        if check():
            return
        await asyncio.sleep(0.05)


async def _sampled_lag_follows_the_consumer(bus: Bus, topic: str) -> None:
    await bus.create_topics([TopicSpec(topic, partitions=2)])
    for i in range(5):
        await bus.publish(topic, b"x", key=str(i).encode())
    subscription = bus.subscribe([topic], group=f"{topic}-group", start_from="earliest")
    await subscription.start()
    registry = CollectorRegistry()
    sampler = LagSampler(bus_metrics(registry).consumer_lag, "test", {topic: subscription}, 0.05)
    task = asyncio.create_task(sampler.run())
    try:
        async with asyncio.timeout(20):
            await _until(lambda: _lag(registry, topic) == 5)
            read = 0
            while read < 5:  # polling goes on while the sampler asks for the lag
                read += len(await subscription.poll(timeout=0.5))
            await _until(lambda: _lag(registry, topic) == 0)
    finally:
        task.cancel()
        await subscription.stop()


async def test_the_gauge_follows_the_lag_on_the_memory_bus() -> None:
    bus = MemoryBus()
    await bus.start()
    try:
        await _sampled_lag_follows_the_consumer(bus, "lagging")
    finally:
        await bus.close()


@pytest.mark.kafka
async def test_the_gauge_follows_the_lag_on_kafka(
    kafka_settings: KafkaSettings, topics: Topics
) -> None:
    bus = KafkaBus(kafka_settings)
    await bus.start()
    try:
        await _sampled_lag_follows_the_consumer(bus, topics.jobs)
    finally:
        await bus.close()


class _Unreachable(MemorySubscription):
    async def lag(self) -> int:
        raise BusError("broker unreachable")


async def test_a_failing_subscription_leaves_the_others_sampled() -> None:
    bus = MemoryBus()
    await bus.start()
    await bus.create_topics([TopicSpec("ok"), TopicSpec("broken")])
    await bus.publish("ok", b"x")
    working = bus.subscribe(["ok"], group=None)
    await working.start()
    unreachable = _Unreachable(bus, ["broken"], None, "earliest", None)
    registry = CollectorRegistry()
    subscriptions: Mapping[str, Subscription] = {"broken": unreachable, "ok": working}
    await LagSampler(bus_metrics(registry).consumer_lag, "test", subscriptions).sample()
    assert _lag(registry, "ok") == 1
    assert _lag(registry, "broken") is None
    await working.stop()
    await bus.close()


def test_one_set_of_bus_metrics_per_registry() -> None:
    registry = CollectorRegistry()
    assert bus_metrics(registry) is bus_metrics(registry)
    assert bus_metrics(CollectorRegistry()) is not bus_metrics(registry)
