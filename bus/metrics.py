"""Bus metrics shared by the hub and the workers: consumer lag, sampled from the subscriptions.

A Prometheus collector runs in the HTTP server's thread and cannot await `Subscription.lag()`,
so a `LagSampler` task on the event loop writes the gauge every few seconds instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from weakref import WeakKeyDictionary

from prometheus_client import CollectorRegistry, Gauge

from bus.base import Subscription

log = logging.getLogger(__name__)

_BY_REGISTRY: WeakKeyDictionary[CollectorRegistry, BusMetrics] = WeakKeyDictionary()


class BusMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.consumer_lag = Gauge(
            "trainhub_bus_consumer_lag",
            "Records after the consumer's position, per consuming component and topic",
            ["component", "topic"],
            registry=registry,
        )


def bus_metrics(registry: CollectorRegistry) -> BusMetrics:
    """One set per registry: the embedded runner's hub and workers share theirs."""
    metrics = _BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = _BY_REGISTRY[registry] = BusMetrics(registry)
    return metrics


class LagSampler:
    """Writes each subscription's lag to `gauge{component, topic}` every `interval` seconds.

    `subscriptions` maps the topic to show in the label to the subscription reading it.
    """

    def __init__(
        self,
        gauge: Gauge,
        component: str,
        subscriptions: Mapping[str, Subscription],
        interval: float = 5.0,
    ) -> None:
        self.gauge = gauge
        self.component = component
        self.subscriptions = dict(subscriptions)
        self.interval = interval

    async def sample(self) -> None:
        for topic, subscription in self.subscriptions.items():
            try:
                lag = await subscription.lag()
            except Exception as error:
                # A metric must never take its process down: a broker hiccup or a
                # subscription that is stopping leaves the last value until the next round.
                log.debug("consumer lag not sampled: %s", error, extra={"topic": topic})
                continue
            self.gauge.labels(self.component, topic).set(lag)

    async def run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(self.interval)
