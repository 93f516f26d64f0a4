"""Pod observations (and what a job's own object tells: its loss, a suspension made there)
handed to their jobs: one lane per job, each in the order the backend made them, so that a
job busy with long work (creating its pods) holds up only its own."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from bus.aiotasks import TaskOwner
from workers.backends.base import BackendError, JobObjectLost, JobObjectNews, PodObservation
from workers.job_locks import JobLocks

log = logging.getLogger(__name__)

Observation = PodObservation | JobObjectNews


class ObservationLanes:
    """`run` takes the backend's observations and gives each to its job's lane; a lane's task
    handles them under the job's lock and ends once the lane is empty."""

    def __init__(
        self,
        queue: asyncio.Queue[PodObservation],
        handle: Callable[[Observation], Awaitable[None]],
        *,
        news: asyncio.Queue[JobObjectNews] | None = None,
        locks: JobLocks,
        tasks: TaskOwner,
        cluster: str,
    ) -> None:
        self._queue = queue
        self._news: asyncio.Queue[JobObjectNews] = asyncio.Queue() if news is None else news
        self._handle = handle
        self._locks = locks
        self._tasks = tasks
        self._cluster = cluster
        self._lanes: dict[str, deque[Observation]] = {}

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._route_from(self._queue))
            group.create_task(self._route_from(self._news))

    async def _route_from(
        self, queue: asyncio.Queue[PodObservation] | asyncio.Queue[JobObjectNews]
    ) -> None:
        while True:
            self._route(await queue.get())

    def _route(self, observation: Observation) -> None:
        uid = observation.job_uid
        lane = self._lanes.get(uid)
        if lane is None:
            lane = self._lanes[uid] = deque()
            self._tasks.spawn(self._follow(uid, lane), f"observe-{uid}")
        lane.append(observation)

    async def _follow(self, uid: str, lane: deque[Observation]) -> None:
        try:
            async with self._locks.job(uid):
                while lane:
                    observation = lane.popleft()
                    try:
                        await self._handle(observation)
                    except BackendError as error:
                        if not error.transient:
                            raise
                        # What the observation decided stays queued: the catch-up loop
                        # retries it.
                        log.warning(
                            "%s: not carried out yet: %s",
                            _named(observation),
                            error,
                            extra={"cluster": self._cluster, "job": uid},
                        )
        finally:
            # Nothing awaits between the empty lane and here: no observation is left behind.
            if self._lanes.get(uid) is lane:
                del self._lanes[uid]

    async def drain(self, uid: str) -> None:
        """Handle the job's observations made so far, here and now (its lock is held): those
        in its lane, then those still queued (every job's are routed to their lanes)."""
        while not self._queue.empty():
            self._route(self._queue.get_nowait())
        while not self._news.empty():
            self._route(self._news.get_nowait())
        lane = self._lanes.get(uid)
        while lane:
            await self._handle(lane.popleft())


def _named(observation: Observation) -> str:
    if isinstance(observation, JobObjectLost):
        return f"the deletion of {observation.what}"
    if not isinstance(observation, PodObservation):
        return f"{'suspending' if observation.suspend else 'resuming'} {observation.what}"
    return f"pod {observation.name}"
