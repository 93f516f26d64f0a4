"""Read a deployment's status topic from a test, judge runs from it, stop its processes."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

from bus.base import UnknownTopicError
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from schemas.codec import decode_event
from schemas.events import CloudEvent, EventType, JobStatusUpdate
from schemas.status import JobPhase
from tests.kafka.processes import Process


async def read_statuses(settings: KafkaSettings, topics: Topics) -> list[JobStatusUpdate]:
    """Every status update on the topic now, in each partition's order."""
    return [event.data_as(JobStatusUpdate) for event in await read_status_events(settings, topics)]


async def read_status_events(settings: KafkaSettings, topics: Topics) -> list[CloudEvent]:
    """Every `job.status` event on the topic now, in each partition's order."""
    bus = KafkaBus(settings)
    await bus.start()
    try:
        subscription = bus.subscribe([topics.status], group=None)
        await subscription.start()
        events: list[CloudEvent] = []
        try:
            while True:
                for record in await subscription.poll(timeout=0.3, max_records=5000):
                    event = decode_event(record.headers, record.value)
                    if event.type == EventType.JOB_STATUS:
                        events.append(event)
                if await subscription.lag() == 0:
                    return events
        finally:
            await subscription.stop()
    finally:
        await bus.close()


async def wait_for_statuses(
    settings: KafkaSettings,
    topics: Topics,
    done: Callable[[list[JobStatusUpdate]], bool],
    timeout: float,
) -> list[JobStatusUpdate]:
    """Re-read the topic until `done` holds or `timeout` passes; returns the last reading.
    A topic the deployment has not created yet reads as empty."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            updates = await read_statuses(settings, topics)
        except UnknownTopicError:
            updates = []
        if done(updates) or time.monotonic() > deadline:
            return updates
        await asyncio.sleep(0.5)


def final_phases(updates: list[JobStatusUpdate]) -> dict[str, JobPhase]:
    latest: dict[str, JobPhase] = {}
    for update in updates:
        latest[update.uid] = update.phase
    return latest


def count_phase(updates: list[JobStatusUpdate], phase: JobPhase) -> Counter[str]:
    """How many updates of each job are in `phase`."""
    return Counter(u.uid for u in updates if u.phase == phase)


def runs_by_job(updates: list[JobStatusUpdate]) -> dict[str, set[tuple[str | None, int]]]:
    """The (cluster, attempt) pairs each job was assigned to or ran as."""
    runs: dict[str, set[tuple[str | None, int]]] = defaultdict(set)
    for update in updates:
        if update.phase in (
            JobPhase.ASSIGNED,
            JobPhase.CREATED,
            JobPhase.RUNNING,
            JobPhase.SUCCEEDED,
        ):
            runs[update.uid].add((update.cluster, update.attempt))
    return runs


def stop_all(processes: Sequence[Process]) -> None:
    """SIGTERM every process, then fail if one of them did not stop cleanly (each is
    stopped first, so a failing one leaves no other running)."""
    codes = {process.name: process.terminate() for process in processes}
    for process in processes:
        assert codes[process.name] in (0, -15), f"{process.name}:\n{process.log()[-3000:]}"
