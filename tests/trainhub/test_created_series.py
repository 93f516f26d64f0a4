"""The hub and worker processes export no `_created` series (prometheus_client's start
time per counter, histogram and summary child, which nothing reads)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from bus.memory import MemoryBus
from trainhub import processes
from trainhub.embedded import make_worker_backend
from trainhub.settings import TrainhubSettings


@pytest.fixture
def created_on() -> Iterator[None]:
    """The library's default (on), as a process that has not yet started a service has it;
    the setting as it was afterwards (it is process-wide)."""
    was_on = prometheus_client.metrics._use_created
    prometheus_client.enable_created_metrics()  # type: ignore[no-untyped-call]
    yield
    if not was_on:
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


@pytest.fixture
def pages(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run a service on a memory bus; its /metrics text once started lands here."""
    seen: list[str] = []
    registries: list[CollectorRegistry] = []

    def registry() -> CollectorRegistry:
        registries.append(CollectorRegistry())
        return registries[-1]

    async def serve(
        start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]], *_: object
    ) -> None:
        await start()
        await asyncio.sleep(0.3)  # a heartbeat or two, a pass of the hub
        seen.append(generate_latest(registries[-1]).decode())
        await stop()

    monkeypatch.setattr(processes, "CollectorRegistry", registry)
    monkeypatch.setattr(processes, "make_bus", lambda settings: MemoryBus())
    monkeypatch.setattr(processes, "serve_until_signalled", serve)
    monkeypatch.setattr(processes, "tune_gc", lambda: None)
    return seen


def _counters_without_created(page: str, counter: str) -> None:
    assert f"{counter}_total" in page, page[:2000]
    # A sample (not a comment) whose name ends in _created: `..._pods_created_total` is fine.
    created = re.findall(r"^[a-zA-Z_:][\w:]*_created(?:\{.*)? .*$", page, re.MULTILINE)
    assert created == [], created[:5]


async def test_the_hub_exports_no_created_series(created_on: None, pages: list[str]) -> None:
    await processes.run_hub(TrainhubSettings(bootstrap="memory"))
    _counters_without_created(pages[0], "trainhub_placements")


async def test_a_worker_exports_no_created_series(created_on: None, pages: list[str]) -> None:
    backend = make_worker_backend("sim", "east", capacity="cpu=4,memory=8Gi")
    settings = TrainhubSettings(bootstrap="memory", heartbeat_interval=0.1)
    await processes.run_worker(settings, backend, "east")
    _counters_without_created(pages[0], "trainhub_worker_heartbeats")


def test_with_created_series_on_the_library_would_export_them(created_on: None) -> None:
    # What the two tests above rule out: the library's default.
    registry = CollectorRegistry()
    prometheus_client.Counter("probe", "a probe", registry=registry).inc()
    assert "probe_created" in generate_latest(registry).decode()
    processes.without_created_series()
    registry = CollectorRegistry()
    prometheus_client.Counter("probe", "a probe", registry=registry).inc()
    assert "probe_created" not in generate_latest(registry).decode()
