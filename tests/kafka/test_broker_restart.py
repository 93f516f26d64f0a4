"""Restart the broker mid-burst: hub, workers and producers reconnect and nothing is lost or
run twice. The broker is this test's own, so restarting it disturbs no other test."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from bus.base import BusError, TopicSpec
from bus.kafka import CLOSE_GRACE_S, KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from schemas.events import JobStatusUpdate
from schemas.status import JobPhase
from tests.helpers import jax_job
from tests.kafka.processes import Process, sim_worker
from tests.kafka.status_topic import (
    count_phase,
    final_phases,
    read_status_events,
    runs_by_job,
    stop_all,
    wait_for_statuses,
)
from trainhub.producer import read_clusters
from trainhub_sandbox.kafka_broker import KafkaBroker, restart_kafka, start_kafka, stop_kafka

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

JOBS = 160
BATCH = 10
RESTART_AFTER_ASSIGNED = 30
DOWNTIME_S = 3.0


@dataclass
class OwnBroker:
    """The test's broker; `current` changes PID with every restart."""

    current: KafkaBroker


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[OwnBroker]:
    if shutil.which("java") is None:
        pytest.skip("restarting a broker needs the sandbox broker (Java 17+ on PATH)")
    holder = OwnBroker(start_kafka(tmp_path / "kafka"))
    try:
        yield holder
    finally:
        stop_kafka(holder.current)


@dataclass(frozen=True)
class Submission:
    code: int
    started: float
    ended: float
    output: str


async def _submit(common: list[str], jobs_file: Path) -> Submission:
    """`trainhub submit` as a producer process of its own."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "trainhub",
        "submit",
        str(jobs_file),
        *common,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), 180)
    finally:
        if process.returncode is None:  # timed out or the test gave up: leave no orphan
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return Submission(
        process.returncode, started, time.monotonic(), output.decode(errors="replace")
    )


async def _submit_in_batches(
    common: list[str], workdir: Path, submitted: list[int]
) -> list[Submission]:
    """Submit JOBS jobs, BATCH per producer process, one process after another."""
    results = []
    for start in range(0, JOBS, BATCH):
        jobs_file = workdir / f"jobs-{start:03d}.yaml"
        jobs_file.write_text(
            yaml.safe_dump_all(
                [
                    jax_job(f"job-{i:03d}", workers=2, duration="1s")
                    for i in range(start, start + BATCH)
                ]
            )
        )
        results.append(await _submit(common, jobs_file))
        submitted.append(BATCH)
    return results


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
async def test_broker_restart_mid_burst_loses_nothing_and_runs_nothing_twice(
    own_broker: OwnBroker, tmp_path: Path, kill: bool
) -> None:
    settings = KafkaSettings(bootstrap=own_broker.current.bootstrap)
    topics = Topics(prefix="restart")
    common = ["--bootstrap", settings.bootstrap, "--topic-prefix", topics.prefix]
    # A lost-cluster timeout shorter than the outage: the hub must not take the broker's
    # silence for its clusters' (it counts only silence it could hear), or every job would
    # be re-dispatched and assigned twice.
    hub = Process(
        "hub",
        ["hub", *common, "--max-heartbeat-age", "5"],
        tmp_path,
    )
    workers = [sim_worker(name, common, tmp_path) for name in ("east", "west")]
    processes = [hub, *workers]
    submitted: list[int] = []
    producer = asyncio.create_task(_submit_in_batches(common, tmp_path, submitted))
    try:

        def enough_placed(updates: list[JobStatusUpdate]) -> bool:
            return sum(count_phase(updates, JobPhase.ASSIGNED).values()) >= RESTART_AFTER_ASSIGNED

        before = await wait_for_statuses(settings, topics, enough_placed, 120)
        assert enough_placed(before), hub.log()[-3000:]
        assert not producer.done(), "the burst ended before the broker could be restarted"

        stop_at = time.monotonic()
        own_broker.current = await asyncio.to_thread(
            restart_kafka, own_broker.current, downtime=DOWNTIME_S, kill=kill
        )
        ready_at, ready_wall = time.monotonic(), datetime.now(UTC)
        outage = ready_at - stop_at

        results = await asyncio.wait_for(producer, 300)
        for result in results:
            assert result.code == 0, result.output
        assert sum(submitted) == JOBS
        # At least one producer was sending while the broker was away and had to wait for it.
        assert any(r.started < ready_at - 1 and r.ended > ready_at for r in results), [
            (r.started - stop_at, r.ended - stop_at) for r in results
        ]

        def all_finished(updates: list[JobStatusUpdate]) -> bool:
            return sum(p.finished for p in final_phases(updates).values()) >= JOBS

        updates = await wait_for_statuses(settings, topics, all_finished, 240)
        finished_at = time.monotonic()
        logs = "\n".join(p.log()[-2000:] for p in processes)
        final = final_phases(updates)
        assert len(final) == JOBS, logs
        assert set(final.values()) == {JobPhase.SUCCEEDED}, logs
        succeeded = count_phase(updates, JobPhase.SUCCEEDED)
        assert set(succeeded.values()) == {1}, {u: n for u, n in succeeded.items() if n > 1}
        assigned = count_phase(updates, JobPhase.ASSIGNED)
        assert set(assigned.values()) == {1}, {u: n for u, n in assigned.items() if n > 1}
        runs = runs_by_job(updates)
        assert all(len(r) == 1 for r in runs.values()), {
            u: r for u, r in runs.items() if len(r) > 1
        }
        assert {attempt for r in runs.values() for _, attempt in r} == {1}
        for process in processes:
            assert process.popen.poll() is None, f"{process.name} exited:\n{process.log()[-3000:]}"

        events = await read_status_events(settings, topics)
        first_after = {
            who: min(
                (e.time for e in events if e.source.startswith(source) and e.time > ready_wall),
                default=None,
            )
            for who, source in (("hub", "trainhub/hub"), ("workers", "trainhub/worker"))
        }
        slowest_submit = max(r.ended - r.started for r in results)
        print(
            f"\nbroker {'killed' if kill else 'stopped'} and down {outage:.1f}s "
            f"(stop + {DOWNTIME_S:.0f}s + start); first status "
            + ", ".join(
                f"from the {who} {(t - ready_wall).total_seconds():.1f}s"
                for who, t in first_after.items()
                if t is not None
            )
            + f" after it was back; slowest submit {slowest_submit:.1f}s; all {JOBS} jobs "
            f"done {finished_at - ready_at:.1f}s after the restart"
        )
        assert all(t is not None for t in first_after.values()), first_after
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
        stop_all(processes)


def _wait_for_line(process: Process, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in process.log():
        assert time.monotonic() < deadline, f"{process.name} never logged {text!r}"
        time.sleep(0.1)


async def _until_the_worker_reports(settings: KafkaSettings, topics: Topics) -> None:
    """Both are up: the hub made the topics and the worker's heartbeat is on them."""
    bus = KafkaBus(settings)
    await bus.start()
    try:
        for _ in range(120):
            with contextlib.suppress(BusError):
                if "gone" in await read_clusters(bus, topics, 30.0):
                    return
            await asyncio.sleep(0.5)
    finally:
        await bus.close()
    raise AssertionError("the worker never reported")


def test_sigterm_stops_hub_and_worker_promptly_and_cleanly_without_a_broker(
    own_broker: OwnBroker, tmp_path: Path
) -> None:
    # While still connecting to a broker that does not answer: at once, not after ~20 s of
    # retries. With the broker gone mid-run: exit 0 without a traceback (aiokafka's consumer
    # stop used to raise CancelledError then).
    common = ["--bootstrap", "127.0.0.1:1"]
    waiting = [
        Process("hub-waiting", ["hub", *common], tmp_path),
        Process(
            "worker-waiting", ["worker", *common, "--cluster", "w", "--backend", "sim"], tmp_path
        ),
    ]
    try:
        for process in waiting:
            _wait_for_line(process, "Kafka unavailable", 30)
            started = time.monotonic()
            assert process.terminate() == 0, process.log()[-2000:]
            assert time.monotonic() - started < 5
    finally:
        for process in waiting:
            process.terminate()  # on failure too: no process outlives the test
    common = ["--bootstrap", own_broker.current.bootstrap, "--topic-prefix", "gone"]
    running = [
        # -v: should a stop hang, the log says which step it reached
        Process("hub-gone", ["-v", "hub", *common], tmp_path),
        sim_worker("gone", common, tmp_path, verbose=True),
    ]
    try:
        settings = KafkaSettings(bootstrap=own_broker.current.bootstrap)
        asyncio.run(_until_the_worker_reports(settings, Topics(prefix="gone")))
        stop_kafka(own_broker.current)  # the fixture's stop finds it gone
        time.sleep(3)
        for process in running:
            started = time.monotonic()
            code = process.terminate(timeout=30)
            log = process.log()
            slow = log.find("still stopping")  # where a hung stop waits (trainhub/processes.py)
            assert code == 0, log[slow : slow + 6000] if slow >= 0 else log[-3000:]
            assert "Traceback" not in log and "Unclosed AIOKafka" not in log, log[-3000:]
            assert time.monotonic() - started < 15
    finally:
        for process in running:
            process.terminate()


async def _close_with_a_record_the_broker_never_took(broker: OwnBroker) -> tuple[float, object]:
    bus = KafkaBus(KafkaSettings(bootstrap=broker.current.bootstrap, client_id="closing"))
    await bus.start()
    topic = "closing-while-gone"
    await bus.create_topics([TopicSpec(topic, partitions=1)])
    await bus.publish(topic, b"delivered")
    stop_kafka(broker.current)
    pending = asyncio.create_task(bus.publish(topic, b"never taken"))
    await asyncio.sleep(1.0)
    assert not pending.done()
    started = time.monotonic()
    await bus.close()
    took = time.monotonic() - started
    outcome = await asyncio.gather(pending, return_exceptions=True)
    return took, outcome[0]


def test_closing_with_the_broker_gone_fails_queued_records_within_the_grace(
    own_broker: OwnBroker,
) -> None:
    # aiokafka's stop alone waits the delivery timeout (120 s) for a record no broker takes;
    # a SIGTERMed hub or worker must not hang on it.
    took, outcome = asyncio.run(_close_with_a_record_the_broker_never_took(own_broker))
    assert took < CLOSE_GRACE_S + 5, took
    assert isinstance(outcome, BaseException), outcome
