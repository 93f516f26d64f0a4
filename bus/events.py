"""CloudEvents over the bus: publish typed events, consume them with commits and dead letters."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence

from pydantic import BaseModel

from bus.base import Bus, Record, StartFrom, TopicPartition
from bus.dead_letters import DeadLetterKey, dead_letter, dead_letter_key
from bus.epochs import EpochFence, record_epoch
from bus.keyed_pipeline import KeyedPipeline
from bus.reading import records_to_end
from schemas.codec import decode_event, encode_event, encode_payload
from schemas.errors import EventDecodeError
from schemas.events import CloudEvent

log = logging.getLogger(__name__)

EventHandler = Callable[[CloudEvent, Record], Awaitable[None]]


async def publish_event(
    bus: Bus, topic: str, key: str, event: CloudEvent, *, wait: bool = True
) -> None:
    """Publish one event; with `wait=False` it is only queued (see `Bus.flush`)."""
    headers, body = encode_event(event)
    await _put(bus, topic, key, headers, body, wait)


async def publish_payload(
    bus: Bus,
    topic: str,
    key: str,
    event_type: str,
    source: str,
    payload: BaseModel,
    *,
    wait: bool = True,
    epoch: int | None = None,
) -> None:
    """`publish_event(bus, topic, key, make_event(event_type, source, key, payload))`,
    without building the envelope (see `encode_payload`): for the hot paths. `epoch`: the
    leading hub's (`CloudEvent.epoch`)."""
    headers, body = encode_payload(event_type, source, key, payload, epoch)
    await _put(bus, topic, key, headers, body, wait)


async def _put(
    bus: Bus, topic: str, key: str, headers: list[tuple[str, bytes]], body: bytes, wait: bool
) -> None:
    if wait:
        await bus.publish(topic, body, key=key.encode(), headers=tuple(headers))
    else:
        await bus.send(topic, body, key=key.encode(), headers=tuple(headers))


class EventConsumer:
    """Runs one subscription: decode, hand to the handler, commit once the effects are durable.

    Handlers may queue their output with `publish_event(..., wait=False)`: the bus is flushed
    before offsets are committed, so a crash in between redelivers the input (at-least-once)
    and handlers make that harmless by being idempotent.

    Undecodable records go to the dead-letter topic and are committed past, so a poison
    record never blocks its partition. A handler that raises ValueError has judged the event
    invalid: that record is dead-lettered too. Any other exception stops the consumer
    without committing, so the record is delivered again after a restart.

    With `concurrency` above 1, a batch's records are handled up to that many keys at once,
    each key's records one after another in their order (see `process`).
    """

    def __init__(
        self,
        bus: Bus,
        topics: Sequence[str],
        handler: EventHandler,
        *,
        group: str | None,
        dead_letter_topic: str,
        component: str,
        start_from: StartFrom = "earliest",
        on_dead_letter: Callable[[Record, str], Awaitable[None]] | None = None,
        skip: Callable[[Record], bool] | None = None,
        commit_behind: bool = False,
        concurrency: int = 1,
        already_dead: Collection[DeadLetterKey] = (),
        fence: EpochFence | None = None,
        session_timeout: float | None = None,
        prefix: str | None = None,
    ) -> None:
        """`skip`: records it returns True for are passed over undecoded (and committed).
        `commit_behind`: `run()` commits in a task of its own, so polling goes on while a
        batch's effects are flushed and its offsets committed (still only in that order).
        `concurrency`: how many keys' records `process` handles at once (1: the batch in
        order); only for handlers whose effects on different keys are independent.
        `already_dead`: records this component dead-lettered before (`dead_lettered_by`),
        passed over when read again rather than copied and counted twice; the caller may
        fill and empty the collection as it goes.
        `fence`: records it refuses (a hub's, of an older epoch than one met before in their
        partition: bus/epochs.py) are passed over, logged; judged in each partition's order
        as polled, before any handling, whatever `concurrency`. `session_timeout`: see
        `Bus.subscribe`, and `prefix` too."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self._bus = bus
        self._concurrency = concurrency
        self._group = group
        self._commit_behind = commit_behind
        self._commit_wanted = asyncio.Event()
        self._committing_behind = False
        """True while `run()` has its commit task going."""
        self._committing = asyncio.Lock()
        self.subscription = bus.subscribe(
            topics,
            group=group,
            start_from=start_from,
            on_revoke=self._on_revoke,
            session_timeout=session_timeout,
            prefix=prefix,
        )
        self._handler = handler
        self._dlq = dead_letter_topic
        self._component = component
        self._on_dead_letter = on_dead_letter
        self._skip = skip
        self._already_dead = already_dead
        self._fence = fence
        self._fenced_off: set[tuple[TopicPartition, int]] = set()
        """Records the fence refused, passed over when their turn comes."""
        self._processed: dict[TopicPartition, int] = {}
        self._pipeline: KeyedPipeline | None = None
        """While `run_by_key` runs: the records in hand."""
        self.idle = asyncio.Event()

    async def run(self) -> None:
        if not self._commit_behind:
            while True:
                await self.poll_once(timeout=0.5)
        self._committing_behind = True
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._commit_loop())
                while True:
                    await self.poll_once(timeout=0.5)
        finally:
            self._committing_behind = False

    async def run_by_key(self, stop: asyncio.Event, *, max_pending: int = 0) -> None:
        """Poll and handle until `stop` is set, records as they come: up to `concurrency`
        keys at once, each key's records in order, polling on while they run as long as fewer
        than `max_pending` (default: four per key slot) are in hand (bus/keyed_pipeline.py).
        Offsets are committed in a task of their own as handled prefixes grow, after a flush.
        Returns once what was in hand has settled and is committed; a handler's failure stops
        new records and is raised once the others settled, past the handled prefix only.
        `stop` cancels a poll in progress; records polled after it are left for the next run."""
        pipeline = KeyedPipeline(
            self._handle_or_skip,
            concurrency=self._concurrency,
            max_pending=max_pending or 4 * self._concurrency,
            on_progress=self._take_progress,
        )
        self._pipeline = pipeline
        self._committing_behind = True
        # A task of its own, not a TaskGroup: a handler's exception is raised as it is.
        committer = asyncio.create_task(self._commit_loop())
        try:
            try:
                await self._feed(pipeline, stop, committer)
                await pipeline.settle()
            except BaseException:
                await pipeline.cancel()
                raise
            # The last commit waits for one the task may have in progress; after it there is
            # nothing left for the task, so it is cancelled only while it waits.
            await self._commit_processed()
        finally:
            committer.cancel()
            self._committing_behind = False
            self._pipeline = None
        if pipeline.failure is not None:
            raise pipeline.failure

    async def _feed(
        self, pipeline: KeyedPipeline, stop: asyncio.Event, committer: asyncio.Task[None]
    ) -> None:
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set() and pipeline.failure is None:
                if committer.done():
                    committer.result()  # a commit that failed for good stops the consumer
                await pipeline.room()
                if stop.is_set() or pipeline.failure is not None:
                    return
                poll = asyncio.ensure_future(
                    self.subscription.poll(timeout=0.5, max_records=pipeline.room_left)
                )
                await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if stop.is_set():
                    poll.cancel()
                    return
                records = poll.result()
                if records:
                    self.idle.clear()
                    self._screen(records)
                    pipeline.offer(records)
                elif not pipeline.pending:
                    self.idle.set()
        finally:
            stopped.cancel()

    def _take_progress(self) -> None:
        if self._pipeline is not None:
            self._processed.update(self._pipeline.take_processed())
            self._commit_wanted.set()

    async def _commit_loop(self) -> None:
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted.clear()
            await self._commit_processed()

    async def poll_once(self, timeout: float = 0.5) -> int:
        records = await self.subscription.poll(timeout=timeout)
        if not records:
            self.idle.set()
            return 0
        self.idle.clear()
        self._screen(records)
        await self.process(records)
        return len(records)

    async def catch_up(self) -> int:
        """Handle everything already in the topics; returns how many records that was."""
        handled = 0
        # Lag first: a poll of topics with nothing left waits its whole timeout.
        while await self.subscription.lag() > 0:
            handled += await self.poll_once(timeout=0.2)
        return handled

    async def process(self, records: list[Record]) -> None:
        """Handle a batch, then commit it (or have the commit task do so). A handler's failure
        is raised once the records in hand have settled; offsets move only past records that
        were handled and all of whose predecessors in their partition were too."""
        if self._concurrency == 1:
            for record in records:
                await self._handle_or_skip(record)
                self._processed[record.tp] = record.offset + 1
        else:
            await self._process_by_key(records)
        if self._committing_behind:
            self._commit_wanted.set()
        else:
            await self._commit_processed()

    async def _commit_processed(self) -> None:
        if not self._processed:
            return
        if self._group is None:
            # No group, no offsets to commit: nothing waits on this batch's effects.
            self._processed = {}
            return
        # One commit at a time, in order: the commit task and a rebalance's revoke may both
        # get here, and an older commit landing after a newer one would move offsets back.
        async with self._committing:
            offsets, self._processed = self._processed, {}
            if not offsets:
                return
            await self._bus.flush()
            await self.subscription.commit(offsets)

    async def _process_by_key(self, records: list[Record]) -> None:
        """Each key's records in order, up to `concurrency` keys at once. After a failure no
        key starts another record; the first failure is raised once the others settle."""
        lanes: dict[bytes | None, list[Record]] = {}
        for record in records:
            lanes.setdefault(record.key, []).append(record)
        waiting = deque(lanes.values())
        handled: set[tuple[TopicPartition, int]] = set()
        failures: list[Exception] = []

        async def drive() -> None:
            while waiting and not failures:
                for record in waiting.popleft():
                    if failures:
                        return
                    try:
                        await self._handle_or_skip(record)
                    except Exception as exc:
                        failures.append(exc)
                        return
                    handled.add((record.tp, record.offset))

        async with asyncio.TaskGroup() as drivers:
            for _ in range(min(self._concurrency, len(lanes))):
                drivers.create_task(drive())
        blocked: set[TopicPartition] = set()
        for record in records:
            if record.tp in blocked:
                continue
            if (record.tp, record.offset) in handled:
                self._processed[record.tp] = record.offset + 1
            else:
                blocked.add(record.tp)
        if failures:
            raise failures[0]

    def _screen(self, records: Sequence[Record]) -> None:
        """Judge the records against the fence, in the order polled."""
        if self._fence is None:
            return
        for record in records:
            if not self._fence.admits(record):
                self._fenced_off.add((record.tp, record.offset))

    async def _handle_or_skip(self, record: Record) -> None:
        if self._fenced_off and (record.tp, record.offset) in self._fenced_off:
            self._fenced_off.discard((record.tp, record.offset))
            log.warning(
                "refused a record of an older hub epoch (%s) than one met before it: a hub "
                "that lost its leadership",
                record_epoch(record),
                extra={"topic": record.topic, "offset": record.offset},
            )
            return
        if self._skip is None or not self._skip(record):
            await self._handle_one(record)

    async def _on_revoke(self, revoked: set[TopicPartition]) -> None:
        # Whatever was handled must be committed before another member takes over.
        self._take_progress()
        await self._commit_processed()
        if self._pipeline is not None:
            self._pipeline.forget(revoked)

    async def _handle_one(self, record: Record) -> None:
        try:
            event = decode_event(record.headers, record.value)
        except EventDecodeError as exc:
            await self._reject(record, f"undecodable: {exc}")
            return
        try:
            await self._handler(event, record)
        except (ValueError, TypeError) as exc:
            await self._reject(record, f"invalid {event.type}: {exc}")

    async def _reject(self, record: Record, reason: str) -> None:
        if self._already_dead and dead_letter_key(record) in self._already_dead:
            log.debug("record dead-lettered before", extra={"offset": record.offset})
            return
        await dead_letter(self._bus, self._dlq, record, reason, self._component)
        if self._on_dead_letter is not None:
            await self._on_dead_letter(record, reason)


def header_is(record: Record, name: str, value: bytes) -> bool:
    """Whether the record carries header `name` with exactly `value` (no decoding)."""
    return any(key == name and raw == value for key, raw in record.headers)


async def events_to_end(
    bus: Bus,
    topic: str,
    *,
    keys: set[str] | None = None,
    fence: EpochFence | None = None,
    positions: dict[TopicPartition, int] | None = None,
) -> AsyncIterator[CloudEvent]:
    """Every decodable event of `topic` from its start to its current end (no group), in
    each partition's order; `keys` keeps only records with those keys; `fence`: records of
    a hub that lost its leadership are passed over (bus/epochs.py). Undecodable records
    are skipped: the topic's own consumers dead-letter them. `positions`: read on from
    there, and moved past every record read, whether passed over or not (`records_to_end`)."""
    async for record in records_to_end(bus, topic, positions=positions):
        if fence is not None and not fence.admits(record):
            continue
        if keys is not None and (
            record.key is None or record.key.decode(errors="replace") not in keys
        ):
            continue
        try:
            yield decode_event(record.headers, record.value)
        except EventDecodeError:
            continue
