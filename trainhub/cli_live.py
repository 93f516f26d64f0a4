"""The live terminal view of `trainhub up` and `trainhub submit --watch`: the jobs and the
member clusters, redrawn as status events and heartbeats arrive, with a progress bar.

`render_live` is a pure function of a `LiveState`; `LiveView` keeps one on screen. Both
commands use it only when stdout is a terminal: piped output stays one line per change.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from bus.base import Bus
from bus.epochs import EpochFence
from bus.topics import Topics
from schemas.cluster import ClusterSnapshot
from schemas.codec import decode_event
from schemas.errors import ContractError, EventDecodeError
from schemas.events import ClusterRetired, EventType, JobStatusUpdate
from schemas.job_parsing import parse_job
from schemas.status import JobPhase
from trainhub.cli_jobs import GPU, format_age, format_cpu, format_gib, resource_share

log = logging.getLogger(__name__)

MAX_JOB_ROWS = 20
"""Jobs shown at once; unfinished jobs come first, the rest are counted in the caption."""
_MESSAGE_CHARS = 60
_REDRAW_SECONDS = 0.5
"""Ages and heartbeat health change with time alone: redraw at least this often."""

_PHASE_STYLE = {
    JobPhase.SUCCEEDED: "bold green",
    JobPhase.FAILED: "bold red",
    JobPhase.REJECTED: "bold red",
    JobPhase.RUNNING: "cyan",
    JobPhase.ASSIGNED: "magenta",
    JobPhase.CREATED: "blue",
    JobPhase.RESTARTING: "yellow",
    JobPhase.SKIPPED: "yellow",
    JobPhase.SUSPENDED: "yellow",
    JobPhase.DELETED: "dim",
}


def want_live(choice: bool | None) -> bool:
    """`--live/--no-live` as given, else live exactly when stdout is a terminal."""
    return sys.stdout.isatty() if choice is None else choice


@dataclass
class JobLine:
    """One job as the view shows it."""

    uid: str
    name: str
    since: datetime
    kind: str | None = None
    phase: JobPhase | None = None
    """None: submitted, no status yet."""
    cluster: str | None = None
    score: float | None = None
    attempt: int = 0
    ready: int = 0
    """Replicas active (pending or running) or succeeded."""
    failed: int = 0
    total: int | None = None
    message: str | None = None

    @property
    def finished(self) -> bool:
        return self.phase is not None and self.phase.finished


@dataclass
class LiveState:
    """What the view knows: the jobs watched (in the order first seen) and every cluster's
    newest heartbeat."""

    title: str = "trainhub"
    max_heartbeat_age: float = 30.0
    jobs: dict[str, JobLine] = field(default_factory=dict)
    clusters: dict[str, ClusterSnapshot] = field(default_factory=dict)

    def expect(self, uid: str, document: dict[str, Any], at: datetime) -> None:
        """A job submitted by this command: shown before the hub answered."""
        meta = document.get("metadata") or {}
        name = f"{meta.get('namespace') or 'default'}/{meta.get('name') or uid}"
        line = self.jobs.setdefault(uid, JobLine(uid=uid, name=name, since=at))
        line.kind = line.kind or document.get("kind")
        line.total = line.total or _replica_total(document)

    def apply(self, update: JobStatusUpdate, at: datetime) -> None:
        """Fold one status event in; one of an earlier attempt than shown changes nothing."""
        name = f"{update.namespace or 'default'}/{update.name}" if update.name else update.uid
        line = self.jobs.setdefault(update.uid, JobLine(uid=update.uid, name=name, since=at))
        if update.attempt < line.attempt:
            return
        line.phase = update.phase
        line.attempt = update.attempt
        line.kind = update.kind or line.kind
        line.cluster = update.cluster
        line.message = update.message
        if update.job is not None:
            line.total = _replica_total(update.job) or line.total
        if update.placement is not None:
            line.score = next(
                (c.score for c in update.placement.clusters if c.name == update.placement.chosen),
                None,
            )
        if update.phase in (JobPhase.QUEUED, JobPhase.ASSIGNED):
            line.ready = line.failed = 0
        if update.status is not None and update.status.replicaStatuses:
            counts = update.status.replicaStatuses.values()
            line.ready = sum(c.active + c.succeeded for c in counts)
            line.failed = sum(c.failed for c in counts)

    def heartbeat(self, snapshot: ClusterSnapshot) -> None:
        self.clusters[snapshot.name] = snapshot

    def retire(self, cluster: str) -> None:
        """An operator retired the cluster (`trainhub retire-cluster`): no longer shown."""
        self.clusters.pop(cluster, None)

    @property
    def finished(self) -> int:
        return sum(1 for j in self.jobs.values() if j.finished)

    @property
    def succeeded(self) -> int:
        return sum(1 for j in self.jobs.values() if j.phase == JobPhase.SUCCEEDED)


def _replica_total(document: dict[str, Any]) -> int | None:
    try:
        return parse_job(document).total_replicas
    except ContractError:
        return None


def _jobs_table(state: LiveState, now: datetime, max_rows: int) -> Table:
    lines = list(state.jobs.values())
    shown = sorted(lines, key=lambda j: j.finished)[:max_rows]
    order = {id(j): i for i, j in enumerate(lines)}
    shown.sort(key=lambda j: order[id(j)])
    hidden = len(lines) - len(shown)
    table = Table(
        title="jobs",
        title_justify="left",
        title_style="bold",
        header_style="bold underline",
        box=None,
        caption=f"and {hidden} more finished jobs" if hidden else None,
        caption_justify="left",
    )
    for column in ("name", "kind", "cluster", "score", "phase", "replicas", "age"):
        right = column in ("score", "replicas", "age")
        table.add_column(column, no_wrap=True, justify="right" if right else "left")
    # The one column that gives way on a narrow terminal; its text stays on one line.
    table.add_column("message")
    for line in shown:
        phase = Text(line.phase.value if line.phase else "Submitted")
        if line.phase is not None:
            phase.stylize(_PHASE_STYLE.get(line.phase, ""))
        replicas = f"{line.ready}/{line.total if line.total is not None else '?'}"
        if line.failed:
            replicas += f" ({line.failed} failed)"
        table.add_row(
            line.name,
            line.kind or "-",
            line.cluster or "-",
            "-" if line.score is None else f"{line.score:.1f}",
            phase,
            replicas,
            format_age(line.since, now),
            Text(_shorten(line.message or "", _MESSAGE_CHARS), no_wrap=True, overflow="ellipsis"),
        )
    return table


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clusters_table(state: LiveState, now: datetime) -> Table:
    table = Table(
        title="clusters (free/total)",
        title_justify="left",
        title_style="bold",
        header_style="bold underline",
        box=None,
    )
    for column in ("name", "health", "nodes", "cpu", "memory", "gpu", "jobs"):
        table.add_column(column, justify="left" if column in ("name", "health") else "right")
    for name in sorted(state.clusters):
        snapshot = state.clusters[name]
        fresh = snapshot.age_seconds(now) <= state.max_heartbeat_age
        if snapshot.healthy and fresh:
            health = Text("healthy", style="green")
        else:
            health = Text("stale" if snapshot.healthy else "unhealthy", style="bold red")
        table.add_row(
            name,
            health,
            str(len(snapshot.nodes)),
            resource_share(snapshot, "cpu", format_cpu),
            resource_share(snapshot, "memory", format_gib),
            resource_share(snapshot, GPU, format_cpu),
            str(len(snapshot.jobs)),
        )
    return table


def _progress(state: LiveState) -> Table:
    total, finished, succeeded = len(state.jobs), state.finished, state.succeeded
    grid = Table.grid(padding=(0, 1))
    grid.add_column()
    grid.add_column()
    summary = Text(f"{finished}/{total} jobs finished")
    summary.append(f"  {succeeded} succeeded", style="green")
    if finished - succeeded:
        summary.append(f"  {finished - succeeded} not succeeded", style="bold red")
    grid.add_row(ProgressBar(total=max(total, 1), completed=finished, width=40), summary)
    return grid


def render_live(
    state: LiveState, now: datetime | None = None, *, max_rows: int = MAX_JOB_ROWS
) -> RenderableType:
    """The whole view: a title, the jobs, the clusters and the progress bar."""
    now = now or datetime.now(UTC)
    parts: list[RenderableType] = [Text(state.title, style="bold")]
    parts.append(_jobs_table(state, now, max_rows))
    if state.clusters:
        parts.append(_clusters_table(state, now))
    else:
        parts.append(Text("clusters: no heartbeat yet", style="dim"))
    parts.append(_progress(state))
    return Group(*parts)


async def follow_heartbeats(
    bus: Bus,
    topics: Topics,
    on_snapshot: Callable[[ClusterSnapshot], None],
    on_retired: Callable[[str], None] | None = None,
) -> None:
    """Every heartbeat on the clusters topic, from its start, until cancelled; and every
    cluster's retirement, to `on_retired`."""
    subscription = bus.subscribe([topics.clusters], group=None, start_from="earliest")
    fence = EpochFence()  # heartbeats as the leading hub passed them on (bus/epochs.py)
    await subscription.start()
    try:
        while True:
            for record in await subscription.poll(timeout=0.5):
                if not fence.admits(record):
                    continue
                try:
                    event = decode_event(record.headers, record.value)
                    if event.type == EventType.CLUSTER_RETIRED and on_retired is not None:
                        on_retired(event.data_as(ClusterRetired).name)
                        continue
                    if event.type != EventType.CLUSTER_HEARTBEAT:
                        continue
                    snapshot = event.data_as(ClusterSnapshot)
                except (EventDecodeError, ValueError):
                    continue  # the hub sends bad heartbeats to the dead-letter topic
                if snapshot.observedAt is None:
                    snapshot = snapshot.model_copy(update={"observedAt": event.time})
                on_snapshot(snapshot)
    finally:
        await subscription.stop()


class LiveView:
    """`async with LiveView(console, state, bus, topics) as view:` keeps the state on screen,
    following the clusters' heartbeats; `view.status(update)` folds in a status event. The
    last frame stays on screen when the block ends."""

    def __init__(self, console: Console, state: LiveState, bus: Bus, topics: Topics) -> None:
        self.console = console
        self.state = state
        self._bus = bus
        self._topics = topics
        self._live = Live(console=console, auto_refresh=False, transient=False)
        self._tasks: list[asyncio.Task[None]] = []

    def redraw(self) -> None:
        self._live.update(render_live(self.state), refresh=True)

    def status(self, update: JobStatusUpdate) -> None:
        self.state.apply(update, datetime.now(UTC))
        self.redraw()

    def _heartbeat(self, snapshot: ClusterSnapshot) -> None:
        self.state.heartbeat(snapshot)
        self.redraw()

    def _retired(self, cluster: str) -> None:
        self.state.retire(cluster)
        self.redraw()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(_REDRAW_SECONDS)
            self.redraw()

    async def _heartbeats(self) -> None:
        try:
            await follow_heartbeats(self._bus, self._topics, self._heartbeat, self._retired)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the jobs are still worth showing without the clusters
            log.warning("the live view stopped following cluster heartbeats: %s", exc)

    async def __aenter__(self) -> LiveView:
        self._live.start()
        self.redraw()
        self._tasks = [
            asyncio.create_task(self._tick(), name="trainhub-live-redraw"),
            asyncio.create_task(self._heartbeats(), name="trainhub-live-heartbeats"),
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self.redraw()
        self._live.stop()
        if not self.console.is_terminal:
            self.console.line()  # a terminal gets it from rich; a file keeps its last line whole
