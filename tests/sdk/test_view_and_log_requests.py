"""How the SDK folds status events into jobs, and how a worker answers log requests."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from bus.base import TopicPartition, TopicSpec
from bus.events import publish_event
from bus.memory import MemoryBus
from bus.topics import Topics
from schemas.events import EventType, JobStatusUpdate, LogsRequested, make_event
from schemas.status import JobPhase, JobStatus
from tests.helpers import jax_job
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.producer import LogsUnanswered, latest_status, request_logs, submit_document
from trainhub.sdk_view import StatusView
from workers.backends.base import PodLogsUnavailable
from workers.cluster_spec import parse_cluster_spec
from workers.log_requests import last_lines

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HUB = "trainhub/hub"


def _update(phase: JobPhase, **fields: object) -> JobStatusUpdate:
    return JobStatusUpdate(uid="u1", name="job", namespace="default", phase=phase, **fields)


def test_worker_updates_count_only_for_the_current_placement() -> None:
    view = StatusView()
    view.apply(_update(JobPhase.QUEUED, submission="s1", queue="q"), HUB, NOW)
    view.apply(_update(JobPhase.ASSIGNED, cluster="east", attempt=1, submission="s1"), HUB, NOW)
    east = "trainhub/worker/east"
    assert view.apply(_update(JobPhase.RUNNING, cluster="east", attempt=1, sequence=2), east, NOW)
    assert not view.apply(
        _update(JobPhase.CREATED, cluster="east", attempt=1, sequence=1), east, NOW
    ), "an older sequence must not win"
    # The hub moved the job: east's late news of attempt 1 is ignored.
    view.apply(_update(JobPhase.ASSIGNED, cluster="west", attempt=2, submission="s1"), HUB, NOW)
    assert not view.apply(
        _update(JobPhase.FAILED, cluster="east", attempt=1, sequence=3), east, NOW
    )
    west = "trainhub/worker/west"
    done = JobStatus(conditions=[{"type": "Succeeded", "status": "True"}])
    assert view.apply(
        _update(JobPhase.SUCCEEDED, cluster="west", attempt=2, sequence=1, status=done), west, NOW
    )
    job = view.jobs["u1"]
    assert job.phase == JobPhase.SUCCEEDED and job.cluster == "west" and job.queue == "q"
    assert job.has_condition("Succeeded") and not job.has_condition("Failed")
    assert [e.phase for e in job.events] == [
        JobPhase.QUEUED,
        JobPhase.ASSIGNED,
        JobPhase.RUNNING,
        JobPhase.ASSIGNED,
        JobPhase.SUCCEEDED,
    ]


def test_a_new_submission_starts_a_new_run_and_refusals_are_remembered() -> None:
    view = StatusView()
    view.apply(_update(JobPhase.QUEUED, submission="s1"), HUB, NOW)
    view.apply(_update(JobPhase.DELETED, submission="s1"), HUB, NOW)
    assert not view.jobs["u1"].has_condition("Succeeded")
    view.apply(_update(JobPhase.QUEUED, submission="s2"), HUB, NOW + timedelta(seconds=1))
    job = view.jobs["u1"]
    assert job.submission == "s2" and [e.phase for e in job.events] == [JobPhase.QUEUED]
    view.apply(_update(JobPhase.QUEUED, submission="s3", reason="AlreadyExists"), HUB, NOW)
    assert "s3" in view.refused and view.jobs["u1"].submission == "s2"
    rejected = _update(JobPhase.REJECTED, reason="Invalid")
    view.apply(rejected, HUB, NOW)
    assert view.jobs["u1"].has_condition("Failed")


def test_last_lines() -> None:
    assert last_lines("a\nb\nc", 2) == "b\nc"
    assert last_lines("a\nb\n", 5) == "a\nb\n"
    assert last_lines("a\n", 0) == ""


async def test_seek_moves_one_partition_and_clamps_to_its_end() -> None:
    bus = MemoryBus()
    await bus.start()
    await bus.create_topics([TopicSpec("t", partitions=1)])
    for i in range(5):
        await bus.publish("t", str(i).encode())
    async with bus.subscribe(["t"], group=None) as subscription:
        await subscription.seek(TopicPartition("t", 0), 3)
        assert [r.value for r in await subscription.poll(timeout=0.1)] == [b"3", b"4"]
        await subscription.seek(TopicPartition("t", 0), 99)
        await bus.publish("t", b"5")
        assert [r.value for r in await subscription.poll(timeout=0.1)] == [b"5"]


async def test_worker_answers_log_requests_and_drops_expired_ones() -> None:
    options = EmbeddedOptions(clusters=[parse_cluster_spec("solo:cpu=4,memory=8Gi")], backend="sim")
    async with Embedded(options) as system:
        uid = await submit_document(system.bus, system.topics, jax_job("j", duration="30s"))
        for _ in range(100):
            if uid in system.worker("solo").runs:
                break
            await asyncio.sleep(0.05)

        def ask(uid: str, deadline: datetime) -> LogsRequested:
            return LogsRequested(request_id=str(uuid.uuid4()), uid=uid, deadline=deadline)

        soon = datetime.now(UTC) + timedelta(seconds=30)
        chunks = [c async for c in request_logs(system.bus, system.topics, "solo", ask(uid, soon))]
        pods = {c.pod for c in chunks if c.pod}
        assert pods == {"j-worker-0", "j-worker-1"} and chunks[-1].final
        assert [c.seq for c in chunks] == list(range(len(chunks)))
        unknown = [
            c async for c in request_logs(system.bus, system.topics, "solo", ask("nope", soon))
        ]
        assert unknown[-1].final and "no pods on cluster solo" in (unknown[-1].error or "")
        past = datetime.now(UTC) - timedelta(seconds=1)
        with pytest.raises(LogsUnanswered, match="did not answer"):
            async for _ in request_logs(
                system.bus, system.topics, "solo", ask(uid, past), answer_timeout=0.5
            ):
                pass


async def test_the_status_command_ignores_a_revoked_placements_late_news() -> None:
    # `trainhub status` reads the newest status; one from a placement the hub took back
    # (the job runs on west now) is not the job's, as the hub and `get jobs` agree.
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="late")
    await bus.create_topics(topics.shared_specs())
    east, west = "trainhub/worker/east", "trainhub/worker/west"
    sequence = [
        (HUB, _update(JobPhase.ASSIGNED, cluster="east", attempt=1, submission="s1")),
        (HUB, _update(JobPhase.ASSIGNED, cluster="west", attempt=2, submission="s1")),
        (west, _update(JobPhase.RUNNING, cluster="west", attempt=2, sequence=5)),
        (east, _update(JobPhase.CREATED, cluster="east", attempt=1, sequence=9)),
    ]
    for source, update in sequence:
        event = make_event(EventType.JOB_STATUS, source, update.uid, update)
        await publish_event(bus, topics.status, update.uid, event)
    found = await latest_status(bus, topics, {"u1"})
    assert found is not None
    assert (found[0].phase, found[0].cluster, found[0].attempt) == (JobPhase.RUNNING, "west", 2)


async def test_a_log_request_no_pod_can_answer_ends_in_an_error_not_in_text() -> None:
    options = EmbeddedOptions(clusters=[parse_cluster_spec("solo:cpu=4,memory=8Gi")], backend="sim")
    async with Embedded(options) as system:
        uid = await submit_document(system.bus, system.topics, jax_job("gone", duration="30s"))
        backend = system.worker("solo").backend
        for _ in range(100):
            if uid in system.worker("solo").runs:
                break
            await asyncio.sleep(0.05)

        async def unreadable(job_uid: str, name: str) -> str:
            raise PodLogsUnavailable(f"no logs for default/{name} on solo: 404 NotFound")

        backend.pod_logs = unreadable  # type: ignore[method-assign]
        request = LogsRequested(
            request_id=str(uuid.uuid4()),
            uid=uid,
            deadline=datetime.now(UTC) + timedelta(seconds=30),
        )
        chunks = [c async for c in request_logs(system.bus, system.topics, "solo", request)]
        assert not [c for c in chunks if c.text]
        assert chunks[-1].final and "no logs for default/gone-worker-0 on solo" in (
            chunks[-1].error or ""
        )
