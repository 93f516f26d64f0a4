"""Records handled as they come, up to N keys at once, each key's records in their order.

A consumer that handled a polled batch whole before polling again let one slow record (a
job whose pods take seconds to create, an action retried through an apiserver's bad minute)
hold up every record polled after it, whatever its key. Here records are offered batch after
batch and each key's lane starts as soon as one of the N slots is free; the consumer polls
again while lanes run, as long as fewer than `max_pending` records wait.

Offsets: a partition's offset moves past a record only once it and every record before it in
that partition were handled, so a crash replays what was in hand (at-least-once) and never
skips a record. After a failure no record starts; the first failure is kept for the consumer
to raise once the records in hand have settled.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

from bus.base import Record, TopicPartition


class KeyedPipeline:
    def __init__(
        self,
        handle: Callable[[Record], Awaitable[None]],
        *,
        concurrency: int,
        max_pending: int,
        on_progress: Callable[[], None] = lambda: None,
    ) -> None:
        """`on_progress`: called whenever some partition's handled prefix grew."""
        self._handle = handle
        self._concurrency = concurrency
        self._max_pending = max_pending
        self._on_progress = on_progress
        self._lanes: dict[bytes | None, deque[Record]] = {}
        """Per key with records in hand, those not started yet (its driver takes them)."""
        self._waiting: deque[bytes | None] = deque()
        """Keys with records and no driver, in the order they came."""
        self._drivers: set[asyncio.Task[None]] = set()
        self._driving = 0
        """Drivers not yet past their last record (a finished task leaves `_drivers` only on
        a later turn of the loop; counting those would leave a new key with no driver)."""
        self._order: dict[TopicPartition, deque[int]] = {}
        """Per partition, the offsets in hand in their order."""
        self._handled: dict[TopicPartition, set[int]] = {}
        self.processed: dict[TopicPartition, int] = {}
        """Per partition whose handled prefix grew since `take_processed`, the offset past it."""
        self.pending = 0
        self.failure: BaseException | None = None
        self._room = asyncio.Event()
        self._room.set()

    def offer(self, records: Iterable[Record]) -> None:
        """Take records in (in their partitions' order); lanes start as slots allow."""
        for record in records:
            self._order.setdefault(record.tp, deque()).append(record.offset)
            self.pending += 1
            lane = self._lanes.get(record.key)
            if lane is None:
                lane = self._lanes[record.key] = deque()
                self._waiting.append(record.key)
            lane.append(record)
        if self.pending >= self._max_pending:
            self._room.clear()
        while self._waiting and self._driving < self._concurrency and self.failure is None:
            self._driving += 1
            driver = asyncio.create_task(self._drive())
            self._drivers.add(driver)
            driver.add_done_callback(self._drivers.discard)

    @property
    def room_left(self) -> int:
        """How many more records may be taken in now."""
        return max(0, self._max_pending - self.pending)

    async def room(self) -> None:
        """Until fewer than `max_pending` records are in hand (or nothing more will start)."""
        await self._room.wait()

    def take_processed(self) -> dict[TopicPartition, int]:
        """The offsets that moved since the last call (what may be committed now)."""
        moved, self.processed = self.processed, {}
        return moved

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Let go of partitions taken away in a rebalance: their records not started yet are
        dropped (the new owner gets them from the last commit), those being handled finish,
        and none of their offsets is reported any more."""
        gone = set(partitions)
        for tp in gone:
            self._order.pop(tp, None)
            self._handled.pop(tp, None)
            self.processed.pop(tp, None)
        for lane in self._lanes.values():
            kept = [r for r in lane if r.tp not in gone]
            if len(kept) != len(lane):
                self.pending -= len(lane) - len(kept)
                lane.clear()
                lane.extend(kept)
        if self.pending < self._max_pending:
            self._room.set()

    async def settle(self) -> None:
        """Wait until the drivers are done: every record handled, or a failure stopped them."""
        while self._drivers:
            await asyncio.wait(set(self._drivers))

    async def cancel(self) -> None:
        """Cancel the records being handled and wait for them (the consumer was cancelled:
        its drivers must not outlive it)."""
        for driver in self._drivers:
            driver.cancel()
        await asyncio.gather(*self._drivers, return_exceptions=True)

    async def _drive(self) -> None:
        try:
            await self._drive_lanes()
        finally:
            self._driving -= 1

    async def _drive_lanes(self) -> None:
        while self._waiting and self.failure is None:
            key = self._waiting.popleft()
            lane = self._lanes[key]
            # A record offered for this key while one of its records is handled joins `lane`
            # and is taken here, so each key has one driver at a time.
            while lane and self.failure is None:
                record = lane.popleft()
                try:
                    await self._handle(record)
                except Exception as exc:
                    self.failure = exc
                    self._room.set()
                    return
                self._handled_one(record)
            if not lane and self._lanes.get(key) is lane:
                del self._lanes[key]

    def _handled_one(self, record: Record) -> None:
        self.pending -= 1
        if self.pending < self._max_pending:
            self._room.set()
        order = self._order.get(record.tp)
        if order is None:
            return  # forgotten in a rebalance
        handled = self._handled.setdefault(record.tp, set())
        handled.add(record.offset)
        moved = False
        while order and order[0] in handled:
            handled.discard(order[0])
            self.processed[record.tp] = order.popleft() + 1
            moved = True
        if moved:
            self._on_progress()
