"""What the dashboard test runs and reads: a workload that touches every metric (jobs that
succeed, restart then fail, get deleted, sit in another queue; undecodable records for the
hub and a worker) and /metrics pages fetched over HTTP."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bus.base import Bus
from bus.topics import Topics
from schemas.events import EventType
from schemas.status import JobPhase
from tests.deploy.promql import Exposition, read_exposition
from tests.deploy.queries import KUBE_API_PREFIX, TARGET_LABELS, all_selectors
from tests.helpers import jax_job
from trainhub.producer import follow_status, request, submit_document


@dataclass
class Scrape:
    """One or more /metrics pages (a hub's and its workers'), read together."""

    text: str

    @property
    def page(self) -> Exposition:
        return read_exposition(self.text)

    def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(self.text)
            for s in family.samples
        }

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels`."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples().items() if n == name and wanted <= ls)

    def has(self, name: str, **labels: str) -> bool:
        wanted = set(labels.items())
        return any(n == name and wanted <= ls for (n, ls) in self.samples())


def _fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body: bytes = response.read()
            return body.decode()
    except (urllib.error.URLError, ConnectionError):
        return None  # not serving yet


async def scrape_until(
    urls: Sequence[str], ready: Callable[[Scrape], bool], timeout: float
) -> Scrape:
    """Scrape every url until all answer and `ready` holds (the hub follows statuses on its
    own schedule, after the producer saw them)."""
    last: Scrape | None = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                pages = [await asyncio.to_thread(_fetch, url) for url in urls]
                if all(page is not None for page in pages):
                    last = Scrape("".join(page or "" for page in pages))
                    if ready(last):
                        return last
                await asyncio.sleep(0.1)
    except TimeoutError:
        seen = "no answer"
        if last is not None:
            seen = ", ".join(f"{n}{ls or ''}={last.value(n, **ls)}" for n, ls, _ in _SETTLED)
        raise AssertionError(f"/metrics not as expected after {timeout}s: {seen}") from None


def _job(name: str, **options: Any) -> dict[str, Any]:
    backoff = options.pop("backoff_limit", None)
    queue = options.pop("queue", None)
    document = jax_job(name, **options)
    if backoff is not None:
        document["spec"]["runPolicy"]["backoffLimit"] = backoff
    if queue is not None:
        document["spec"]["runPolicy"]["schedulingPolicy"] = {"queue": queue}
    return document


async def run_workload(bus: Bus, topics: Topics, junk_for: str, timeout: float = 60) -> None:
    """A success, a restart then failure (backoff limit), a success in queue `team-a`, a job
    deleted while it runs, then one undecodable record for the hub and one for the worker of
    cluster `junk_for`."""
    long_job = await submit_document(bus, topics, _job("metrics-deleted", duration="60s"))
    uids = [
        long_job,
        await submit_document(bus, topics, _job("metrics-ok", workers=2)),
        await submit_document(
            bus,
            topics,
            _job(
                "metrics-restarts",
                workers=1,
                exit_code="1",
                restart_policy="OnFailure",
                backoff_limit=1,
            ),
        ),
        await submit_document(bus, topics, _job("metrics-team-a", queue="team-a")),
    ]
    final: dict[str, JobPhase] = {}
    deleting = False
    async with asyncio.timeout(timeout):
        async for update in follow_status(bus, topics, uids):
            if update.uid == long_job and update.phase == JobPhase.RUNNING and not deleting:
                deleting = True
                await request(bus, topics, EventType.JOB_DELETED, long_job)
            if update.phase.finished:
                final.setdefault(update.uid, update.phase)
            if len(final) == len(uids):
                break
    assert [final[u] for u in uids] == [
        JobPhase.DELETED,
        JobPhase.SUCCEEDED,
        JobPhase.FAILED,
        JobPhase.SUCCEEDED,
    ]
    await bus.publish(topics.jobs, b"{not json", key=b"junk", headers=())
    await bus.publish(topics.assignments(junk_for), b"{not json", key=b"junk", headers=())


_SETTLED: list[tuple[str, dict[str, str], float]] = [
    ("training_operator_jobs_successful_total", {}, 2),
    ("training_operator_jobs_deleted_total", {}, 1),
    ("training_operator_jobs_failed_total", {}, 1),
    ("trainhub_dead_letters_total", {}, 1),
    ("trainhub_worker_dead_letters_total", {}, 1),
    ("trainhub_hub_jobs", {"phase": "Succeeded"}, 2),
]


def settled(scrape: Scrape) -> bool:
    """The hub and the workers have counted everything the workload did."""
    return all(scrape.value(name, **labels) == value for name, labels, value in _SETTLED)


def unserved_queries(scrape: Scrape) -> list[str]:
    """Every dashboard/rule selector whose series the pages lack, lack samples of (after the
    workload), or lack a matched label of; kube API series need a kube worker (tests/kube)."""
    page = scrape.page
    problems: list[str] = []
    for where, found in all_selectors().items():
        for selector in found:
            name = selector.name
            if name not in page.declared:
                problems.append(f"{where}: {name} is not exported")
            elif name.startswith(KUBE_API_PREFIX):
                continue
            elif name not in page.sampled:
                problems.append(f"{where}: {name} has no samples after the workload")
            elif missing := selector.labels - page.labels[name] - TARGET_LABELS:
                problems.append(f"{where}: {name} has no label {sorted(missing)}")
    return problems
