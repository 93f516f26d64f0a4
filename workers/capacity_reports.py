"""A worker's heartbeats: its cluster's capacity, read and reported one report at a time, and
never reported while the hub may have moved away jobs that the numbers still count."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from bus.base import Bus
from bus.events import publish_payload
from bus.topics import Topics
from schemas.cluster import ClusterSnapshot
from schemas.events import EventType
from workers.backends.base import Backend, BackendError, Capacity
from workers.job_locks import JobLocks
from workers.metrics import WorkerMetrics
from workers.worker_config import WorkerConfig

log = logging.getLogger(__name__)

_SWEEP_ROUNDS = 2
"""Sweeps one heartbeat may make before a capacity read comes back in time to report it."""
_STOP_REPORT_S = 2.0
"""How long a stop waits for the bus to take its last report. With the broker gone, a record
may not even queue: aiokafka holds a send until the partition's earlier batch drains."""


class StaleCapacity(BackendError):
    """Capacity reads kept coming back later than a heartbeat may be late: none is reported
    (the hub may have moved jobs meanwhile, so the numbers may count them)."""

    transient = True


class CapacityReports:
    """A heartbeat every interval (`run`), and one soon after room is freed (`run_asked`).

    After a heartbeat that failed or came late the hub may have moved jobs away (and revoked
    them here): `sweep` deletes those, with every job's work held off, and the capacity is
    read again before anything is reported."""

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        backend: Backend,
        config: WorkerConfig,
        metrics: WorkerMetrics,
        *,
        locks: JobLocks,
        sweep: Callable[[], Awaitable[None]],
    ) -> None:
        self._bus = bus
        self._topics = topics
        self._backend = backend
        self._config = config
        self._metrics = metrics
        self._locks = locks
        self._sweep = sweep
        self._sequence = 0
        self._instance = uuid.uuid4().hex[:12]
        """This process among any others reporting the same cluster name (a misconfiguration
        the hub detects)."""
        self._reporting = asyncio.Lock()
        """One capacity read and report at a time: two reads in flight could otherwise be
        reported in the order they completed, the older picture last, and the hub would take
        it for the newest (room that a job's pods already took)."""
        self._in_doubt = False
        """A heartbeat failed or came late, so the hub may have moved jobs away: sweep before
        reporting capacity again."""
        self._reported_at: float | None = None
        """Monotonic time of the capacity read last reported (or of the last sweep's start)."""
        self._asked = asyncio.Event()
        self._asked_at = 0.0
        self._read_started_at = 0.0
        """Monotonic time the latest capacity read began."""

    def _extra(self) -> dict[str, str | None]:
        return {"cluster": self._config.cluster, "job": None}

    async def run(self) -> None:
        """A heartbeat every interval; a transient refusal skips one (silence is the report:
        if it lasts, the hub marks the cluster lost), a refusal for good is raised (e.g. the
        identity may not list nodes: a misconfiguration)."""
        while True:
            await asyncio.sleep(self._config.heartbeat_interval)
            try:
                await self.heartbeat()
            except BackendError as error:
                if not error.transient:
                    raise
                log.warning("no heartbeat: %s", error, extra=self._extra())

    async def heartbeat(self) -> ClusterSnapshot:
        """Read the capacity and report it, sweeping first when in doubt."""
        async with self._reporting:
            capacity, read_at = await self._read_capacity()
            if self._in_doubt:
                async with self._locks.every_job():
                    capacity, read_at = await self._swept_capacity()
            return await self._report(capacity, read_at)

    def report_soon(self) -> None:
        """Ask for freed capacity to reach the hub now rather than at the next periodic
        heartbeat. Returns at once (the caller may hold a job's lock): `run_asked` reports,
        once for every ask made before its read began."""
        self._asked_at = time.monotonic()
        self._asked.set()

    async def run_asked(self) -> None:
        """Report when asked to; skipped while in doubt (the periodic heartbeat sweeps first),
        when a read that began after the ask is reported already, and on a refusal (the
        periodic heartbeat reports it)."""
        while True:
            await self._asked.wait()
            self._asked.clear()
            asked_at = self._asked_at
            async with self._reporting:
                if self._in_doubt or self._read_started_at > asked_at:
                    continue
                try:
                    capacity, read_at = await self._read_capacity()
                except BackendError as error:
                    log.warning("no heartbeat now: %s", error, extra=self._extra())
                    continue
                if not self._in_doubt:
                    await self._report(capacity, read_at)

    async def _read_capacity(self) -> tuple[Capacity, float]:
        """The capacity and the monotonic time it was read; a failed read, or one that comes
        back later than a heartbeat may be late, puts the worker in doubt."""
        self._read_started_at = time.monotonic()
        try:
            capacity = await self._backend.capacity()
        except BackendError:
            self._in_doubt = True
            raise
        read_at = time.monotonic()
        overdue = self._config.heartbeat_overdue_after
        if self._reported_at is not None and read_at - self._reported_at > overdue:
            if not self._in_doubt:
                log.warning(
                    "capacity read %.1fs after the last one reported: sweeping before reporting",
                    read_at - self._reported_at,
                    extra=self._extra(),
                )
            self._in_doubt = True
        return capacity, read_at

    async def _swept_capacity(self) -> tuple[Capacity, float]:
        """Sweep, then read the capacity again (every job's work held off)."""
        for _ in range(_SWEEP_ROUNDS):
            if self._in_doubt:
                started = time.monotonic()
                await self._sweep()
                self._in_doubt = False
                self._reported_at = started
            capacity, read_at = await self._read_capacity()
            if not self._in_doubt:
                return capacity, read_at
        raise StaleCapacity(
            f"capacity reads keep taking over {self._config.heartbeat_overdue_after:.1f}s"
        )

    async def report_stopped(self) -> None:
        """Tell the hub at once that this worker stopped, rather than by the silence it takes
        `max_heartbeat_age` to notice: meanwhile it placed new jobs here. Unhealthy and
        without capacity; sent without the instance, since a successor may already report
        (two instances in turns would read as a duplicated worker). Best effort: a stop
        goes on when the bus does not take it."""
        async with self._reporting:
            snapshot = self._snapshot(
                healthy=False, unhealthyReason="its worker stopped", instance=None
            )
            try:  # queued only: the bus's last flush on closing sends it, bounded in time
                async with asyncio.timeout(_STOP_REPORT_S):
                    await self._publish(snapshot, wait=False)
            except TimeoutError:
                log.warning(
                    "could not report the stop: the bus did not take it within %.0fs",
                    _STOP_REPORT_S,
                    extra=self._extra(),
                )
            except Exception as error:  # the bus is going or gone: the silence will tell
                log.warning("could not report the stop: %s", error, extra=self._extra())

    def _snapshot(self, **fields: Any) -> ClusterSnapshot:
        """The next heartbeat of this cluster, with `fields`."""
        config = self._config
        self._sequence += 1
        return ClusterSnapshot(
            name=config.cluster,
            observedAt=datetime.now(UTC),
            labels=config.labels or {},
            namespaces=config.namespaces,
            backend=self._backend.kind,
            sequence=self._sequence,
            policy=config.policy,
            weight=config.weight,
            cost=config.cost,
            **fields,
        )

    async def _publish(self, snapshot: ClusterSnapshot, *, wait: bool = True) -> None:
        config = self._config
        await publish_payload(
            self._bus,
            self._topics.reports(config.cluster),
            config.cluster,
            EventType.CLUSTER_HEARTBEAT,
            config.source,
            snapshot,
            wait=wait,
        )

    async def _report(self, capacity: Capacity, read_at: float) -> ClusterSnapshot:
        config = self._config
        snapshot = self._snapshot(
            healthy=True,
            nodes=capacity.nodes,
            instance=self._instance,
            jobs=sorted(capacity.jobs),
        )
        await self._publish(snapshot)
        self._reported_at = read_at
        self._metrics.heartbeats.labels(config.cluster).inc()
        for resource in {r for n in snapshot.nodes for r in n.allocatable}:
            self._metrics.free.labels(config.cluster, resource).set(float(snapshot.free(resource)))
        return snapshot
