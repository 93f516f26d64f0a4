"""Producer side of the bus: submit jobs and requests, follow status events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from bus.base import Bus, Subscription
from bus.epochs import EpochFence
from bus.events import events_to_end, publish_event
from bus.topics import Topics
from dispatcher.worker_instances import InstanceWatch
from schemas.cluster import ClusterSnapshot
from schemas.codec import decode_event
from schemas.errors import EventDecodeError
from schemas.events import (
    CloudEvent,
    ClusterRetired,
    EventType,
    JobRef,
    JobStatusUpdate,
    JobSubmitted,
    JobUpdated,
    LogsChunk,
    LogsRequested,
    PodsListed,
    PodsRequested,
    make_event,
)
from schemas.job_parsing import job_uid_of
from schemas.status import ALREADY_EXISTS
from trainhub.sdk_view import StatusView

SOURCE = "trainhub/producer"


async def submit_document(bus: Bus, topics: Topics, document: dict[str, Any]) -> str:
    """Publish a job document as `job.submitted`; returns the job uid (the record key)."""
    uid, _ = await submit_with_id(bus, topics, document)
    return uid


async def submit_with_id(bus: Bus, topics: Topics, document: dict[str, Any]) -> tuple[str, str]:
    """Like `submit_document`, also returning the submission's event id, which the hub's
    status updates for this run carry (see `follow_submissions`)."""
    return await _publish_document(bus, topics, document, EventType.JOB_SUBMITTED, JobSubmitted)


async def update_document(bus: Bus, topics: Topics, document: dict[str, Any]) -> str:
    """Publish a job's new document as `job.updated`; returns the job uid (the record key,
    so the update follows the job's submission and requests in order)."""
    uid, _ = await _publish_document(bus, topics, document, EventType.JOB_UPDATED, JobUpdated)
    return uid


async def _publish_document(
    bus: Bus,
    topics: Topics,
    document: dict[str, Any],
    event_type: str,
    payload: type[JobSubmitted] | type[JobUpdated],
) -> tuple[str, str]:
    """A job document on the jobs topic, keyed by the job's uid; its uid and event id."""
    uid = job_uid_of(document)
    if uid is None:
        raise ValueError("the job has no metadata.name (or uid) to identify it")
    event = make_event(event_type, SOURCE, uid, payload(job=document))
    await publish_event(bus, topics.jobs, uid, event)
    return uid, event.id


async def follow_submissions(
    bus: Bus, topics: Topics, submissions: dict[str, str], *, from_time_ms: int
) -> AsyncIterator[JobStatusUpdate]:
    """Status updates of exactly these runs (uid -> submission event id): earlier runs of a
    job with the same name are skipped, and a refused duplicate is reported once."""
    current: set[str] = set()
    async for update in follow_status(bus, topics, submissions, from_time_ms=from_time_ms):
        if update.submission == submissions[update.uid]:
            current.add(update.uid)
        if update.uid in current:
            yield update


async def request(bus: Bus, topics: Topics, event_type: str, uid: str) -> None:
    """Send a delete / suspend / resume request for a job."""
    await publish_event(bus, topics.jobs, uid, make_event(event_type, SOURCE, uid, JobRef(uid=uid)))


async def follow_status(
    bus: Bus,
    topics: Topics,
    uids: Iterable[str] | None = None,
    *,
    from_time_ms: int | None = None,
    poll_timeout: float = 0.5,
) -> AsyncIterator[JobStatusUpdate]:
    """Status updates from the start of the topic (or a time), for some or all jobs."""
    wanted = set(uids) if uids is not None else None
    fence = EpochFence()  # a hub that lost its lead is not believed (bus/epochs.py)
    subscription = bus.subscribe([topics.status], group=None, start_from="earliest")
    await subscription.start()
    try:
        if from_time_ms is not None:
            await subscription.seek_to_time(from_time_ms)
        while True:
            for record in await subscription.poll(timeout=poll_timeout):
                if not fence.admits(record):
                    continue
                try:
                    event = decode_event(record.headers, record.value)
                except EventDecodeError:
                    continue
                if event.type != EventType.JOB_STATUS:
                    continue
                try:
                    update = event.data_as(JobStatusUpdate)
                except ValueError:
                    continue  # a malformed status is nobody's state; followers skip it
                if wanted is None or update.uid in wanted:
                    yield update
    finally:
        await subscription.stop()


async def latest_status(
    bus: Bus, topics: Topics, uids: set[str]
) -> tuple[JobStatusUpdate, datetime] | None:
    """The newest status update of any of `uids` on the status topic (read to its end), and
    when it was published. Updates count as the hub counts them: a late one from a placement
    the hub revoked (the job runs elsewhere now), or an answer to a refused submission, is
    not the job's status."""
    view = StatusView()
    latest: tuple[JobStatusUpdate, datetime] | None = None
    async for event in events_to_end(bus, topics.status, keys=uids, fence=EpochFence()):
        if event.type == EventType.JOB_STATUS:
            try:
                update = event.data_as(JobStatusUpdate)
            except ValueError:
                continue
            if update.reason == ALREADY_EXISTS:  # an answer to a refused submission
                continue
            if view.apply(update, event.source, event.time):
                latest = update, event.time
    return latest


class LogsUnanswered(TimeoutError):
    """No worker answered a log request in time."""


LOG_ANSWER_TIMEOUT = 30.0
"""Seconds to wait for a worker's first answer to a log request."""
_LOG_LATE_GRACE = 30.0
"""How long after a request's deadline its final chunk may still arrive."""


@asynccontextmanager
async def _asked(
    bus: Bus, topics: Topics, cluster: str, uid: str, request: CloudEvent
) -> AsyncIterator[Subscription]:
    """Send a request about job `uid` to the worker of `cluster` (on its assignments topic)
    and yield a subscription to the logs topic, where its answer comes keyed by the request
    id."""
    subscription = bus.subscribe([topics.logs], group=None, start_from="latest")
    await subscription.start()
    try:
        # lag() makes the consumer resolve its start (the end of the topic) now, before the
        # request leaves, so no part of the answer can fall before it.
        await subscription.lag()
        await publish_event(bus, topics.assignments(cluster), uid, request)
        yield subscription
    finally:
        await subscription.stop()


async def request_logs(
    bus: Bus,
    topics: Topics,
    cluster: str,
    request: LogsRequested,
    *,
    answer_timeout: float = LOG_ANSWER_TIMEOUT,
) -> AsyncIterator[LogsChunk]:
    """Ask the worker of `cluster` for a job's logs and yield its answer, chunk by chunk, in
    order and without duplicates, up to and including the final chunk."""
    key = request.request_id.encode()
    event = make_event(EventType.LOGS_REQUESTED, SOURCE, request.uid, request)
    async with _asked(bus, topics, cluster, request.uid, event) as subscription:
        loop = asyncio.get_running_loop()
        first_by = loop.time() + answer_timeout
        last_by = (
            loop.time()
            + max(0.0, (request.deadline - datetime.now(UTC)).total_seconds())
            + _LOG_LATE_GRACE
        )
        next_seq = 0
        while True:
            for record in await subscription.poll(timeout=0.5):
                if record.key != key:
                    continue
                try:
                    decoded = decode_event(record.headers, record.value)
                except EventDecodeError:
                    continue
                if decoded.type != EventType.LOGS_CHUNK:
                    continue
                chunk = decoded.data_as(LogsChunk)
                if chunk.seq < next_seq:
                    continue  # a redelivered request answered twice
                next_seq = chunk.seq + 1
                yield chunk
                if chunk.final:
                    return
            now = loop.time()
            if next_seq == 0 and now > first_by:
                raise LogsUnanswered(
                    f"the worker of cluster {cluster} did not answer the log request within "
                    f"{answer_timeout:g}s (is it running?)"
                )
            if now > last_by:
                raise LogsUnanswered(f"the worker of cluster {cluster} never ended its answer")


class PodsUnanswered(TimeoutError):
    """No worker answered a pod request in time."""


POD_ANSWER_TIMEOUT = 3.0
"""Seconds to wait for a worker's answer to a pod request: it answers from memory (or one
list call to its cluster), so a longer silence means it is down or busy past use."""


async def request_pods(
    bus: Bus,
    topics: Topics,
    cluster: str,
    request: PodsRequested,
    *,
    answer_timeout: float = POD_ANSWER_TIMEOUT,
) -> PodsListed:
    """Ask the worker of `cluster` for the phases of a job's pods; its answer, or
    `PodsUnanswered` when none came within `answer_timeout` seconds of the request."""
    key = request.request_id.encode()
    event = make_event(EventType.PODS_REQUESTED, SOURCE, request.uid, request)
    async with _asked(bus, topics, cluster, request.uid, event) as subscription:
        loop = asyncio.get_running_loop()
        answer_by = loop.time() + answer_timeout
        while (left := answer_by - loop.time()) > 0:
            for record in await subscription.poll(timeout=min(0.5, left)):
                if record.key != key:
                    continue
                try:
                    decoded = decode_event(record.headers, record.value)
                    if decoded.type == EventType.PODS_LISTED:
                        return decoded.data_as(PodsListed)
                except (EventDecodeError, ValueError):
                    continue
        raise PodsUnanswered(
            f"the worker of cluster {cluster} did not answer the pod request within "
            f"{answer_timeout:g}s (is it running?)"
        )


async def read_clusters(
    bus: Bus, topics: Topics, window: float = 30.0
) -> dict[str, ClusterSnapshot]:
    """The newest heartbeat of every cluster on the clusters topic (read to its end). A name
    two worker processes reported in turns within `window` seconds of its newest heartbeat
    comes back unhealthy, with the reason, as the hub sees it."""
    clusters: dict[str, ClusterSnapshot] = {}
    instances = InstanceWatch(window)
    # Heartbeats as the leading hub passed them on (bus/epochs.py).
    async for event in events_to_end(bus, topics.clusters, fence=EpochFence()):
        if event.type == EventType.CLUSTER_RETIRED:
            clusters.pop(event.data_as(ClusterRetired).name, None)
            continue
        if event.type != EventType.CLUSTER_HEARTBEAT:
            continue
        # One partition, in the order written: the last heartbeat is the newest.
        snapshot = event.data_as(ClusterSnapshot)
        observed = snapshot.observedAt or event.time
        if observed.tzinfo is None:
            observed = observed.replace(tzinfo=UTC)
        if snapshot.observedAt is None:
            snapshot = snapshot.model_copy(update={"observedAt": observed})
        instances.observe(snapshot.name, snapshot.instance, observed)
        clusters[snapshot.name] = snapshot
    for name, snapshot in clusters.items():
        observed = snapshot.observedAt or datetime.now(UTC)
        if observed.tzinfo is None:
            observed = observed.replace(tzinfo=UTC)
        conflict = instances.conflict(name, observed)
        if conflict is not None:
            update = {"healthy": False, "unhealthyReason": conflict}
            clusters[name] = snapshot.model_copy(update=update)
    return clusters


class ClusterStillReporting(ValueError):
    """`retire_cluster` refused: the cluster's heartbeat is fresh (its worker runs)."""


async def retire_cluster(
    bus: Bus,
    topics: Topics,
    name: str,
    *,
    max_age: float,
    force: bool = False,
    reason: str | None = None,
) -> ClusterSnapshot:
    """Tell the hub to forget a member cluster whose worker is gone for good; the cluster's
    last snapshot. KeyError: no such cluster on the clusters topic; ClusterStillReporting:
    its heartbeat is at most `max_age` seconds old and not `force`."""
    clusters = await read_clusters(bus, topics)
    snapshot = clusters.get(name)
    if snapshot is None:
        known = ", ".join(sorted(clusters)) or "none"
        raise KeyError(f"no cluster named {name!r} reports on this bus (known: {known})")
    age = snapshot.age_seconds(datetime.now(UTC))
    if age <= max_age and not force:
        raise ClusterStillReporting(
            f"cluster {name!r} reported {age:.0f}s ago: stop its worker first (retiring a "
            "live cluster lasts only until its next heartbeat), or give --force"
        )
    payload = ClusterRetired(name=name, reason=reason)
    event = make_event(EventType.CLUSTER_RETIRED, "trainhub/cli", name, payload)
    await publish_event(bus, topics.clusters, name, event)
    return snapshot
