"""Standby hubs: several `trainhub hub` processes, one leading, the others waiting ready.

Leadership comes from Kafka itself: every hub process joins the consumer group
`<prefix>-hub-leader` on the one-partition topic `<prefix>.leader`, and the member the group
gives that partition leads. On taking it, the leader appends a claim to the topic; the
claim's offset (plus one) is its epoch, which only grows, since the log is the counter.
Everything the leader publishes carries the epoch, and it first marks every partition it
writes with it (`Hub.start`), so a reader refuses a hub's record of an older epoch met after
the mark (bus/epochs.py): a leader that was paused while a standby took over can never be
acted on. A leader that learns it lost the partition stops at once (the process exits and
its supervisor starts it again as a standby, as Kubernetes controllers do with their leases).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import CollectorRegistry, Gauge
from pydantic_core import to_json

from bus.aiotasks import TaskOwner
from bus.base import Bus, Subscription, TopicPartition
from bus.topics import Topics
from dispatcher.hub import Hub
from dispatcher.hub_config import HubConfig

log = logging.getLogger(__name__)


class LostLeadership(RuntimeError):
    """This hub no longer leads: another took over while it was away."""


class Leadership:
    """One hub process's membership in the election."""

    def __init__(
        self, bus: Bus, topics: Topics, instance: str, *, session_timeout: float = 6.0
    ) -> None:
        self._bus = bus
        self._topics = topics
        self._instance = instance
        self._session_timeout = session_timeout
        self._subscription: Subscription | None = None
        self.lost = asyncio.Event()
        """Set when the partition is taken from this process."""
        self.epoch: int | None = None

    async def acquire(self) -> int:
        """Join and wait until this process leads; returns its epoch."""
        subscription = self._bus.subscribe(
            [self._topics.leader],
            group=self._topics.leader_group,
            start_from="latest",
            session_timeout=self._session_timeout,
            # A standby joining or leaving does not move the partition from its leader.
            sticky=True,
        )
        await subscription.start()
        self._subscription = subscription
        while not subscription.assignment():
            await subscription.poll(timeout=0.5)
        claim = to_json({"instance": self._instance})
        written = await self._bus.publish(self._topics.leader, claim, key=b"leader")
        self.epoch = written.offset + 1
        log.warning("leading the hubs at epoch %d", self.epoch, extra={"instance": self._instance})
        return self.epoch

    async def keep(self) -> None:
        """Stay in the group while leading (a member that stops polling is dropped); returns
        once another hub has claimed the lead (its claim is after this one's)."""
        assert self._subscription is not None and self.epoch is not None
        claims = self._bus.subscribe([self._topics.leader], group=None)
        await claims.start()
        try:
            await claims.seek(TopicPartition(self._topics.leader, 0), self.epoch)
            while not self.lost.is_set():
                await self._subscription.poll(timeout=0.2)
                if await claims.poll(timeout=0.2):
                    self.lost.set()  # a newer claim: another hub leads
        finally:
            await claims.stop()

    async def leave(self) -> None:
        if self._subscription is not None:
            await self._subscription.stop()
            self._subscription = None


class LeadingHub:
    """A `trainhub hub` process: stands by until it leads, then runs the hub at its epoch;
    if it loses the lead it stops the hub and fails (`crashed`), to start again as a
    standby."""

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        config: HubConfig,
        registry: CollectorRegistry,
        instance: str,
        *,
        session_timeout: float = 6.0,
    ) -> None:
        self._bus = bus
        self._topics = topics
        self._config = config
        self._registry = registry
        self.leadership = Leadership(bus, topics, instance, session_timeout=session_timeout)
        self.hub: Hub | None = None
        self._tasks = TaskOwner("leading-hub")
        self._leading = Gauge(
            "trainhub_hub_leader",
            "1 while this hub process leads, 0 while it stands by",
            registry=registry,
        )
        self._epoch = Gauge(
            "trainhub_hub_epoch", "The epoch this hub process leads at (0: none)", registry=registry
        )
        self.leading = asyncio.Event()

    @property
    def crashed(self) -> asyncio.Future[BaseException] | None:
        return self._tasks.failed

    async def start(self) -> None:
        await self._bus.create_topics(self._topics.shared_specs())
        self._tasks.spawn(self._lead(), "lead")

    async def _lead(self) -> None:
        epoch = await self.leadership.acquire()
        hub = Hub(self._bus, self._topics, self._config, registry=self._registry, epoch=epoch)
        self.hub = hub
        await hub.start()
        self._leading.set(1)
        self._epoch.set(epoch)
        self.leading.set()
        keeping = asyncio.ensure_future(self.leadership.keep())
        waiters: set[asyncio.Future[Any]] = {keeping}
        if hub.crashed is not None:
            waiters.add(hub.crashed)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            keeping.cancel()
        if hub.crashed is not None and hub.crashed.done():
            raise hub.crashed.result()
        self._leading.set(0)
        log.error("lost the lead of the hubs (epoch %d): stopping", epoch)
        await hub.stop()
        self.hub = None
        raise LostLeadership(f"another hub took the lead from epoch {epoch}")

    async def stop(self) -> None:
        await self._tasks.cancel_all()
        if self.hub is not None:
            await self.hub.stop()
            self.hub = None
        self._leading.set(0)
        await self.leadership.leave()
