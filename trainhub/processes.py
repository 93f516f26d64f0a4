"""Long-running processes (`trainhub hub`, `trainhub worker`): start, serve, stop on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, disable_created_metrics, start_http_server

from bus.base import Bus
from dispatcher.hub_config import HubConfig
from dispatcher.leadership import LeadingHub
from schemas.cluster import ClusterPolicy
from trainhub.bus_factory import make_bus
from trainhub.settings import TrainhubSettings
from workers.backends.base import Backend
from workers.worker import Worker

log = logging.getLogger(__name__)


class ServiceCrashed(RuntimeError):
    """A background task of the hub or worker died; the process ends with this one line."""


_CLOSE_TIMEOUT = 10.0
"""Seconds the last flush and close may take: with the broker gone, aiokafka would wait out
its request timeout (what it has not sent is not committed either, so it is read again)."""


async def serve_until_signalled(
    start: Callable[[], Awaitable[None]],
    stop: Callable[[], Awaitable[None]],
    failed: Callable[[], asyncio.Future[BaseException] | None] | None = None,
) -> None:
    """Run until SIGTERM or SIGINT (or a background task crashes), then stop gracefully. A
    signal while still starting (say, retrying an unreachable broker) stops at once."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    signalled = asyncio.ensure_future(stopping.wait())
    try:
        starting = asyncio.ensure_future(start())
        await asyncio.wait({starting, signalled}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            log.info("stopped while starting")
            return
        starting.result()  # a failed start raises here
        waiters: list[asyncio.Future[Any]] = [signalled]
        crash = failed() if failed else None
        if crash is not None:
            waiters.append(crash)
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if crash is not None and crash.done():
            raise ServiceCrashed(f"a background task failed: {crash.result()!r}")
    finally:
        signalled.cancel()
        log.info("shutting down")
        watchdog = asyncio.create_task(_report_a_slow_stop(asyncio.current_task()))
        try:
            await stop()
        finally:
            watchdog.cancel()


_SLOW_STOP_S = 10.0
"""A stop still going after this long is logged with where each task waits: a pod's grace
period is typically 30 s, and the SIGKILL after it leaves no word of which step hung."""


async def _report_a_slow_stop(stopping: asyncio.Task[Any] | None) -> None:
    await asyncio.sleep(_SLOW_STOP_S)
    waits = []
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task():
            name = "the stop" if task is stopping else task.get_name()
            waits.append(f"{name}: {' -> '.join(_awaiting(task.get_coro())) or '?'}")
    log.warning(
        "still stopping after %.0f s; waiting in:\n  %s", _SLOW_STOP_S, "\n  ".join(sorted(waits))
    )


def _awaiting(coro: object) -> list[str]:
    """The chain of coroutines a task is suspended in, outermost first (a task's own
    `get_stack` gives only the outermost frame of a suspended coroutine)."""
    chain: list[str] = []
    while coro is not None and len(chain) < 16:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        chain.append(
            f"{frame.f_code.co_name} ({Path(frame.f_code.co_filename).name}:{frame.f_lineno})"
        )
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain


async def close_bus(bus: Bus) -> None:
    """The last flush and close, bounded: the graceful stop before it (handing work back,
    stopping pods) takes what it takes, but a broker that is gone would hold this one for
    aiokafka's whole request timeout."""
    try:
        await asyncio.wait_for(bus.close(), _CLOSE_TIMEOUT)
    except TimeoutError:
        log.warning("could not close cleanly within %.0fs (Kafka unreachable?)", _CLOSE_TIMEOUT)


def check_metrics_port(settings: TrainhubSettings) -> None:
    """Bind-test the metrics port before anything connects: ValueError with the reason."""
    port = settings.metrics_port
    if port is None:
        return
    with socket.socket(socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))  # where start_http_server listens
        except OSError as exc:
            raise ValueError(
                f"--metrics-port {port}: cannot listen there ({exc.strerror})"
            ) from None


def without_created_series() -> None:
    """Export no `<counter>_created` (nor histogram or summary) series, for every metric made
    after this call in this process: one more series per labelled child, holding a start
    time that no panel or alert reads (`process_start_time_seconds` says it once), doubles
    what Prometheus stores for the counters. Called where a process starts: the hub, a
    worker, and the embedded system of `trainhub up`."""
    disable_created_metrics()  # type: ignore[no-untyped-call]


def _metrics(settings: TrainhubSettings, registry: CollectorRegistry) -> None:
    """Serve /metrics, once the process has connected and (the hub) rebuilt its state: the
    chart's readiness probe and the absent-metrics alerts read an answer as "working"."""
    if settings.metrics_port is not None:
        server, _ = start_http_server(settings.metrics_port, registry=registry)
        log.info("metrics on http://0.0.0.0:%d/metrics", server.server_port)


def tune_gc() -> None:
    """For a long-running hub: what start-up built (modules, settings, the rebuilt ledger) is
    moved out of the collector's sight, and young collections run per 50,000 allocations
    instead of 700, so a full collection over every record the hub holds comes rarely
    rather than every few hundred events (each one a latency spike)."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def hub_config(settings: TrainhubSettings) -> HubConfig:
    """The hub's configuration from the settings (ValueError: invalid placement settings)."""
    return settings.hub_config()


async def run_hub(settings: TrainhubSettings) -> None:
    """One hub process: it leads, or stands by until the leader is gone
    (dispatcher/leadership.py); one that loses the lead exits, to start again standing by."""
    without_created_series()
    bus = make_bus(settings)
    registry = CollectorRegistry()
    instance = f"{socket.gethostname()}/{os.getpid()}"
    hub = LeadingHub(bus, settings.topics(), hub_config(settings), registry, instance)

    async def start() -> None:
        await bus.start()
        _metrics(settings, registry)
        await hub.start()
        tune_gc()

    async def stop() -> None:
        await hub.stop()
        await close_bus(bus)

    await serve_until_signalled(start, stop, lambda: hub.crashed)


async def run_worker(
    settings: TrainhubSettings,
    backend: Backend,
    cluster: str,
    labels: dict[str, str] | None = None,
    namespaces: list[str] | None = None,
    *,
    weight: float | None = None,
    cost: float | None = None,
    policy: ClusterPolicy | None = None,
) -> None:
    without_created_series()
    bus: Bus = make_bus(settings)
    registry = CollectorRegistry()
    worker = Worker(
        bus,
        backend,
        settings.worker_config(
            cluster,
            labels=labels,
            namespaces=namespaces,
            weight=weight,
            cost=cost,
            policy=policy or ClusterPolicy(),
        ),
        settings.topics(),
        registry=registry,
    )

    async def start() -> None:
        await bus.start()
        await worker.start()
        _metrics(settings, registry)

    async def stop() -> None:
        await worker.stop()
        await close_bus(bus)

    await serve_until_signalled(start, stop, lambda: worker.crashed)


def default_logs_dir(cluster: str) -> Path:
    return Path.home() / ".cache" / "trainhub" / "logs" / cluster
