"""The live view of `trainhub up` and `trainhub submit --watch`: the rendering from real status
events, the terminal path through a pseudo-terminal, and the piped path left as it was."""

from __future__ import annotations

import asyncio
import io
import os
import re
import select
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from bus.events import publish_event
from bus.kafka_settings import KafkaSettings
from bus.memory import MemoryBus
from bus.topics import Topics
from schemas.events import ClusterRetired, EventType, JobStatusUpdate, make_event
from schemas.status import JobPhase
from tests.cli import run_trainhub
from tests.helpers import cluster, jax_job, node, publish_passed_on
from trainhub.cli_live import LiveState, follow_heartbeats, render_live
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.producer import read_clusters
from workers.cluster_spec import parse_cluster_spec

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
LINE = re.compile(r"^\d\d:\d\d:\d\d default/(good|bad) (\w+)")


def text_of(state: LiveState, now: datetime = NOW, width: int = 160) -> str:
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    console.print(render_live(state, now))
    return console.export_text()


def row(text: str, first: str) -> list[str]:
    """The cells of the row that starts with `first` (cells are separated by 2+ spaces)."""
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{text}")


async def _run(documents: list[dict[str, object]]) -> tuple[list[str], list[JobStatusUpdate]]:
    """Run the jobs on the embedded sim runner; their uids and every status event seen."""
    options = EmbeddedOptions(
        clusters=[
            parse_cluster_spec("east:cpu=4,memory=8Gi"),
            parse_cluster_spec("west:cpu=8,memory=16Gi"),
        ],
        backend="sim",
        heartbeat_interval=0.1,
    )
    seen: list[JobStatusUpdate] = []
    async with Embedded(options) as system:
        uids = [await system.submit(d) for d in documents]
        await system.wait_finished(uids, seen.append, timeout=60)
    return uids, seen


async def test_render_follows_real_status_events_to_the_end() -> None:
    good = jax_job("good", workers=2, cpu="1", duration="0.5s")
    bad = jax_job("bad", workers=1, exit_code="2", duration="0.2s")
    uids, events = await _run([good, bad])
    state = LiveState(title="trainhub up: test")
    for uid, document in zip(uids, [good, bad], strict=True):
        state.expect(uid, document, NOW)
    before = text_of(state)
    assert row(before, "default/good")[1:] == ["JAXJob", "-", "-", "Submitted", "0/2", "0s"]
    assert "0/2 jobs finished" in before and "clusters: no heartbeat yet" in before

    running = next(i for i, e in enumerate(events) if e.phase == JobPhase.RUNNING)
    for event in events[: running + 1]:
        state.apply(event, NOW)
    mid = text_of(state, NOW + timedelta(seconds=75))
    cells = row(mid, "default/" + (events[running].name or ""))
    assert cells[1] == "JAXJob" and cells[2] in ("east", "west")
    assert float(cells[3]) > 0  # the chosen cluster's score, from the Assigned event
    assert cells[4] == "Running" and cells[6] == "1m"

    for event in events[running + 1 :]:
        state.apply(event, NOW)
    end = text_of(state)
    assert row(end, "default/good")[4:6] == ["Succeeded", "2/2"]
    failed = row(end, "default/bad")
    assert failed[4:6] == ["Failed", "0/1 (1 failed)"]
    assert "2/2 jobs finished  1 succeeded  1 not succeeded" in end


async def test_clusters_show_free_and_total_from_real_heartbeats() -> None:
    options = EmbeddedOptions(
        clusters=[
            parse_cluster_spec("east:cpu=4,memory=8Gi"),
            parse_cluster_spec("gpus:cpu=16,memory=64Gi,gpu=4,nodes=2"),
        ],
        backend="sim",
        heartbeat_interval=0.1,
    )
    async with Embedded(options) as system:
        uid = await system.submit(
            jax_job(
                "held", workers=1, cpu="2", duration="30s", extra_resources={"nvidia.com/gpu": "3"}
            )
        )
        deadline = time.monotonic() + 20
        while True:
            snapshots = await read_clusters(system.bus, system.topics)
            if uid in snapshots.get("gpus", cluster("gpus")).jobs:
                break
            assert time.monotonic() < deadline, snapshots
            await asyncio.sleep(0.1)
    state = LiveState()
    for snapshot in snapshots.values():
        state.heartbeat(snapshot)
    text = text_of(state, snapshots["gpus"].observedAt or NOW)
    assert row(text, "east")[1:] == ["healthy", "1", "4/4", "8.0Gi/8.0Gi", "-", "0"]
    assert row(text, "gpus")[1:] == ["healthy", "2", "30/32", "127.0Gi/128.0Gi", "5/8", "1"]


def test_stale_and_unhealthy_clusters_are_marked() -> None:
    state = LiveState(max_heartbeat_age=30)
    state.heartbeat(cluster("old", node("o0", cpu="4"), observedAt=NOW - timedelta(seconds=31)))
    state.heartbeat(cluster("sick", node("s0", cpu="4"), healthy=False, observedAt=NOW))
    state.heartbeat(cluster("fine", node("f0", cpu="4"), observedAt=NOW))
    text = text_of(state)
    assert row(text, "old")[1] == "stale"
    assert row(text, "sick")[1] == "unhealthy"
    assert row(text, "fine")[1] == "healthy"


def test_updates_of_an_earlier_attempt_do_not_go_back() -> None:
    state = LiveState()
    state.apply(
        JobStatusUpdate(uid="u", name="j", phase=JobPhase.ASSIGNED, cluster="b", attempt=2), NOW
    )
    state.apply(
        JobStatusUpdate(uid="u", name="j", phase=JobPhase.RUNNING, cluster="a", attempt=1), NOW
    )
    assert row(text_of(state), "default/j")[2:5] == ["b", "-", "Assigned"]


def test_many_jobs_show_the_unfinished_first_and_count_the_rest() -> None:
    state = LiveState()
    for index in range(30):
        phase = JobPhase.SUCCEEDED if index < 25 else JobPhase.RUNNING
        state.apply(JobStatusUpdate(uid=f"u{index}", name=f"j{index}", phase=phase), NOW)
    text = text_of(state, width=200)
    for index in range(25, 30):
        assert f"default/j{index} " in text
    shown = [i for i in range(30) if re.search(rf"default/j{i}\s", text)]
    assert len(shown) == 20
    assert "and 10 more finished jobs" in text
    assert "25/30 jobs finished" in text


# -- the command, piped and on a terminal --------------------------------------------------


def _files(tmp_path: Path) -> tuple[Path, Path]:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(jax_job("good", workers=2, duration="0.5s")))
    bad.write_text(yaml.safe_dump(jax_job("bad", workers=1, exit_code="2")))
    return good, bad


def on_terminal(*args: str, timeout: float = 120) -> tuple[int, str]:
    """Run `trainhub ARGS` with stdout on a pseudo-terminal; its exit code and output."""
    primary, secondary = os.openpty()
    env = {**os.environ, "COLUMNS": "150", "LINES": "50", "TERM": "xterm-256color"}
    process = subprocess.Popen(
        [sys.executable, "-m", "trainhub", *args],
        stdout=secondary,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    os.close(secondary)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(primary)
    return code, b"".join(chunks).decode(errors="replace")


def plain(output: str) -> str:
    """Terminal output without escape sequences."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r", "", output)


def test_piped_up_keeps_one_line_per_status_change(tmp_path: Path) -> None:
    good, bad = _files(tmp_path)
    for files, code in (([good], 0), ([good, bad], 1)):
        result = run_trainhub(
            "up", "--backend", "sim", "--exit-on-finish", *(str(f) for f in files)
        )
        assert result.returncode == code, result.stdout + result.stderr
        lines = result.stdout.splitlines()
        assert lines[0] == (
            "trainhub up: hub + 2 clusters (east, west), sim backend, in-memory bus"
        )
        phases = [m.groups() for m in map(LINE.match, lines) if m]
        good_phases = [p for name, p in phases if name == "good"]
        assert good_phases[0] == "Queued" and good_phases[-1] == "Succeeded"
        assert {"Assigned", "Running"} <= set(good_phases)
        assert "placement of default/good" in result.stdout
        assert "jobs finished" not in result.stdout and "\x1b[" not in result.stdout
    assert ("bad", "Failed") in phases


def test_up_on_a_terminal_shows_the_live_view_with_the_same_exit_codes(tmp_path: Path) -> None:
    good, bad = _files(tmp_path)
    code, output = on_terminal("up", "--backend", "sim", "--exit-on-finish", str(good))
    shown = plain(output)
    assert code == 0, shown
    assert "1/1 jobs finished" in shown and "clusters (free/total)" in shown
    assert "all jobs succeeded" in shown
    assert not re.search(r"^\d\d:\d\d:\d\d default/good", shown, re.MULTILINE)
    code, output = on_terminal("up", "--backend", "sim", "--exit-on-finish", str(good), str(bad))
    assert code == 1 and "2/2 jobs finished" in plain(output)
    code, output = on_terminal("up", "--backend", "sim", "--exit-on-finish", "--no-live", str(good))
    assert code == 0 and re.search(r"^\d\d:\d\d:\d\d default/good Succeeded", plain(output), re.M)


@pytest.mark.kafka
def test_submit_watch_on_a_terminal_exits_0_only_on_success(
    kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    from tests.kafka.processes import Process

    common = ["--bootstrap", kafka_settings.bootstrap, "--topic-prefix", topics.prefix]
    hub = Process("hub", ["hub", *common], tmp_path)
    worker = Process(
        "worker",
        ["worker", *common, "--cluster", "solo", "--backend", "sim", "--heartbeat-interval", "0.5"],
        tmp_path,
    )
    try:
        good, bad = _files(tmp_path)
        code, output = on_terminal("submit", str(good), "--watch", *common)
        shown = plain(output)
        assert code == 0, shown + hub.log()
        assert "1/1 jobs finished" in shown and "Succeeded" in shown
        assert re.search(r"solo\s+healthy", shown), shown
        code, output = on_terminal("submit", str(bad), "--watch", *common)
        assert code == 1 and "Failed" in plain(output)
    finally:
        assert hub.terminate() in (0, -15), hub.log()[-2000:]
        assert worker.terminate() in (0, -15), worker.log()[-2000:]


async def test_the_live_view_drops_a_retired_cluster() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="live-retire")
    await bus.create_topics(topics.shared_specs())
    state = LiveState()
    for name in ("east", "gone"):
        await publish_passed_on(bus, topics, cluster(name, node("n1", cpu="4", memory="8Gi")))
    retired = ClusterRetired(name="gone")
    await publish_event(
        bus, topics.clusters, "gone", make_event(EventType.CLUSTER_RETIRED, "cli", "gone", retired)
    )
    follower = asyncio.create_task(follow_heartbeats(bus, topics, state.heartbeat, state.retire))
    try:
        deadline = time.monotonic() + 10
        while "east" not in state.clusters or "gone" in state.clusters:
            assert time.monotonic() < deadline, state.clusters
            await asyncio.sleep(0.05)
        assert sorted(state.clusters) == ["east"]
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        await bus.close()


async def test_the_readme_screenshot_demo_runs_its_jobs_as_shown(tmp_path: Path) -> None:
    """`python -m trainhub.cli_live_demo` records docs/live-view.svg: every job in it must
    still pass validation, or the image would be recorded with Rejected rows."""
    from trainhub.cli_live_demo import JOBS, record

    image = tmp_path / "live.svg"
    state = await record(image)
    phases = {line.name.split("/")[-1]: line.phase for line in state.jobs.values()}
    assert len(phases) == len(JOBS)
    assert phases.pop("flaky") == JobPhase.FAILED  # the one meant to fail (exit code 3)
    assert set(phases.values()) == {JobPhase.SUCCEEDED}, phases
    assert image.stat().st_size > 0
