"""Two `trainhub hub` processes on the real broker: one leads, the other stands by. A SIGKILLed
leader is replaced within 10 s; a leader that was only paused (SIGSTOP) while the standby
took over, then continued (SIGCONT), stops, and nothing it sent after the new leader's mark
is acted on: every job runs once and ends Succeeded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from bus.epochs import EpochFence
from bus.events import events_to_end
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from schemas.events import EventType, JobStatusUpdate
from schemas.status import JobPhase
from tests.helpers import jax_job
from tests.kafka.processes import Process, sim_worker
from tests.kafka.status_topic import final_phases
from trainhub.producer import submit_document

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


async def _claims(settings: KafkaSettings, topics: Topics) -> list[tuple[int, str, float]]:
    """(epoch, instance, when) of every leadership claim so far."""
    bus = KafkaBus(settings)
    await bus.start()
    try:
        subscription = bus.subscribe([topics.leader], group=None)
        await subscription.start()
        found: list[tuple[int, str, float]] = []
        try:
            while await subscription.lag() > 0:
                for record in await subscription.poll(timeout=0.3):
                    assert record.value is not None
                    instance = json.loads(record.value)["instance"]
                    found.append((record.offset + 1, instance, record.timestamp_ms / 1000))
        finally:
            await subscription.stop()
        return found
    finally:
        await bus.close()


async def _leader(settings: KafkaSettings, topics: Topics, timeout: float = 60) -> tuple[int, int]:
    """The (epoch, pid) of the newest claim, waiting for the first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            claims = await _claims(settings, topics)
        except Exception:  # the topic may not exist yet
            claims = []
        if claims:
            epoch, instance, _ = claims[-1]
            return epoch, int(instance.rsplit("/", 1)[1])
        assert time.monotonic() < deadline, "no hub took the lead"
        await asyncio.sleep(0.3)


async def _new_leader(
    settings: KafkaSettings, topics: Topics, after: int, timeout: float
) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while True:
        epoch, pid = await _leader(settings, topics)
        if epoch > after:
            return epoch, pid
        assert time.monotonic() < deadline, f"no new leader within {timeout}s"
        await asyncio.sleep(0.2)


async def _submit(settings: KafkaSettings, topics: Topics, names: list[str]) -> list[str]:
    bus = KafkaBus(settings)
    await bus.start()
    try:
        return [
            await submit_document(bus, topics, jax_job(name, workers=2, duration="0.3s"))
            for name in names
        ]
    finally:
        await bus.close()


def _runs(updates: list[JobStatusUpdate]) -> dict[str, set[tuple[str | None, int]]]:
    runs: dict[str, set[tuple[str | None, int]]] = defaultdict(set)
    for update in updates:
        if update.phase in (JobPhase.CREATED, JobPhase.RUNNING, JobPhase.SUCCEEDED):
            runs[update.uid].add((update.cluster, update.attempt))
    return runs


async def _believed_statuses(settings: KafkaSettings, topics: Topics) -> list[JobStatusUpdate]:
    """The status topic as trainhub's readers take it: a hub's status of an older epoch after
    a newer leader's mark is not believed (bus/epochs.py)."""
    bus = KafkaBus(settings)
    await bus.start()
    try:
        return [
            event.data_as(JobStatusUpdate)
            async for event in events_to_end(bus, topics.status, fence=EpochFence())
            if event.type == EventType.JOB_STATUS
        ]
    finally:
        await bus.close()


async def _all_succeed_once(settings: KafkaSettings, topics: Topics, uids: list[str]) -> None:
    deadline = time.monotonic() + 120
    while True:
        updates = await _believed_statuses(settings, topics)
        final = final_phases(updates)
        if all(final.get(uid, JobPhase.QUEUED).finished for uid in uids):
            break
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    final = final_phases(updates)
    assert {final.get(uid) for uid in uids} == {JobPhase.SUCCEEDED}, final
    runs = _runs(updates)
    assert all(len(runs[uid]) == 1 for uid in uids), {u: runs[u] for u in uids}
    succeeded: defaultdict[str, int] = defaultdict(int)
    for update in updates:
        if update.phase == JobPhase.SUCCEEDED:
            succeeded[update.uid] += 1
    assert all(succeeded[uid] == 1 for uid in uids), succeeded


async def test_a_killed_leader_is_replaced_and_a_paused_one_is_never_acted_on(
    kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    common = ["--bootstrap", kafka_settings.bootstrap, "--topic-prefix", topics.prefix]
    hub_args = ["hub", *common]
    first = Process("hub-a", hub_args, tmp_path)
    epoch, pid = await _leader(kafka_settings, topics)
    assert pid == first.popen.pid
    second = Process("hub-b", hub_args, tmp_path)
    worker = sim_worker("east", common, tmp_path, capacity="cpu=64,memory=256Gi,nodes=4")
    processes = [first, second, worker]
    try:
        await _all_succeed_once(
            kafka_settings, topics, await _submit(kafka_settings, topics, ["one", "two"])
        )

        # SIGKILL: the standby leads within 10 s, at a newer epoch.
        killed_at = time.time()
        first.kill()
        epoch_b, pid_b = await _new_leader(kafka_settings, topics, epoch, timeout=30)
        took_over = (await _claims(kafka_settings, topics))[-1][2] - killed_at
        print(f"takeover after SIGKILL: {took_over:.1f}s")
        assert pid_b == second.popen.pid
        assert took_over < 10, took_over
        await _all_succeed_once(
            kafka_settings, topics, await _submit(kafka_settings, topics, ["three", "four"])
        )

        # SIGSTOP: a third process takes over; the paused one, continued, stops leading.
        third = Process("hub-c", hub_args, tmp_path)
        processes.append(third)
        await asyncio.sleep(2)  # standing by
        second.popen.send_signal(signal.SIGSTOP)
        later = await _submit(kafka_settings, topics, [f"paused-{i}" for i in range(6)])
        _, pid_c = await _new_leader(kafka_settings, topics, epoch_b, timeout=30)
        assert pid_c == third.popen.pid
        second.popen.send_signal(signal.SIGCONT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(second.popen.wait, 30)
        assert second.popen.returncode not in (None, 0), second.log()[-3000:]
        assert "lost the lead" in second.log()
        await _all_succeed_once(kafka_settings, topics, later)
        await _all_succeed_once(
            kafka_settings, topics, await _submit(kafka_settings, topics, ["five"])
        )
    finally:
        for process in processes:
            if process.popen.poll() is None:
                process.popen.send_signal(signal.SIGCONT)
            process.terminate()
