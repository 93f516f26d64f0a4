"""The hub's TrainJob runtimes: operators' from the runtimes topic over this process's
(shipped, then files), read from the topic's start when the hub starts and followed after.

A TrainJob naming a runtime the catalog lacks is judged only once the follower has read the
topic up to where it ended when the job was looked at: a runtime applied (acknowledged)
before the job was submitted is then known, however far the follower lagged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from bus.base import Bus, BusPermissionError, Record, Subscription, TopicPartition
from bus.dead_letters import DeadLetterKey, dead_letter, dead_letter_key
from bus.runtimes import apply_record
from bus.topics import Topics
from schemas.trainer import RuntimeRef
from schemas.trainer_runtimes import RuntimeCatalog, record_key, runtime_catalog

log = logging.getLogger(__name__)

CATCH_UP_WAIT = 30.0
"""Seconds a look-up waits for the follower to reach the topic's end before it gives up and
judges with what it has (logged): only while the broker does not answer."""


class RuntimeFollower:
    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        *,
        component: str,
        on_dead_letter: Callable[[Record, str], Awaitable[None]] | None = None,
    ) -> None:
        self.catalog = RuntimeCatalog(base=runtime_catalog)
        """Shipped < files < the bus: what the hub resolves TrainJobs in."""
        self._bus = bus
        self._topics = topics
        self._component = component
        self._on_dead_letter = on_dead_letter
        self._subscription: Subscription | None = None
        self._through: dict[TopicPartition, int] = {}
        """Per partition, the offset up to which every record has been applied."""
        self._progress = asyncio.Condition()

    async def start(self, already_dead: Collection[DeadLetterKey] = ()) -> None:
        """Read the topic from its start to its end. A hub whose user may not read it (ACLs
        of before this topic) runs with the shipped and file runtimes, saying so."""
        subscription = self._bus.subscribe([self._topics.runtimes], group=None)
        try:
            await subscription.start()
            while await subscription.lag() > 0:
                await self._apply(await subscription.poll(timeout=0.2), already_dead)
            self._through = await subscription.positions()
        except BusPermissionError as exc:
            await subscription.stop()
            log.warning(
                "cannot read the runtimes topic (%s): only the shipped and file runtimes are "
                "known; grant the hub READ on %s",
                exc,
                self._topics.runtimes,
            )
            return
        except BaseException:
            await subscription.stop()
            raise
        self._subscription = subscription
        log.info("runtimes known: %s", self.catalog.known_text())

    async def run(self) -> None:
        """Follow the topic (a task the hub owns)."""
        subscription = self._subscription
        if subscription is None:
            return
        while True:
            records = await subscription.poll(timeout=0.5)
            await self._apply(records)
            through = await subscription.positions()
            async with self._progress:
                self._through = through
                self._progress.notify_all()

    async def stop(self) -> None:
        if self._subscription is not None:
            await self._subscription.stop()
            self._subscription = None

    async def known(self, document: Any) -> None:
        """Before a job document is judged: when it is a TrainJob naming a runtime the
        catalog lacks, wait until every runtime written before now has been applied."""
        ref = _runtime_ref(document)
        if ref is None or self._subscription is None:
            return
        if self.catalog.find(*ref) is not None:
            return
        await self.catch_up()

    async def catch_up(self) -> None:
        """Wait until the follower has applied the topic up to its end as of now."""
        subscription = self._subscription
        if subscription is None:
            return
        try:
            async with asyncio.timeout(CATCH_UP_WAIT):
                ends = await subscription.ends()
                async with self._progress:
                    await self._progress.wait_for(
                        lambda: all(self._through.get(tp, 0) >= end for tp, end in ends.items())
                    )
        except TimeoutError:
            log.warning(
                "runtimes topic not read to its end within %.0fs: judging with the runtimes "
                "known so far",
                CATCH_UP_WAIT,
            )

    async def _apply(
        self, records: list[Record], already_dead: Collection[DeadLetterKey] = ()
    ) -> None:
        for record in records:
            try:
                key = apply_record(self.catalog, record)
            except ValueError as exc:
                await self._reject(record, f"invalid runtime: {exc}", already_dead)
                continue
            log.info(
                "runtime %s",
                "deleted" if record.value is None else "applied",
                extra={"runtime": record_key(key), "offset": record.offset},
            )

    async def _reject(
        self, record: Record, reason: str, already_dead: Collection[DeadLetterKey]
    ) -> None:
        if dead_letter_key(record) in already_dead:
            return  # set aside by this hub, or a predecessor, at an earlier start
        await dead_letter(self._bus, self._topics.dead_letters, record, reason, self._component)
        if self._on_dead_letter is not None:
            await self._on_dead_letter(record, reason)


def _runtime_ref(document: Any) -> tuple[RuntimeRef, str] | None:
    """A TrainJob document's runtimeRef and namespace, when it gives them in shape."""
    if not isinstance(document, dict) or document.get("kind") != "TrainJob":
        return None
    spec, metadata = document.get("spec"), document.get("metadata")
    if not isinstance(spec, dict) or not isinstance(metadata, dict):
        return None
    try:
        ref = RuntimeRef.model_validate(spec.get("runtimeRef"))
    except ValueError:
        return None
    namespace = metadata.get("namespace", "default")
    return (ref, namespace) if isinstance(namespace, str) else None
