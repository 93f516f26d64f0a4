"""The client's calls that follow jobs as they run: waiting for a job's conditions, its pods,
its logs from the worker of its cluster, and the stream of status events."""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from bus.base import Bus, BusError
from bus.topics import Topics
from schemas.events import ListedPod, LogsChunk, LogsRequested, PodsRequested
from schemas.kubeflow import JOB_CLASSES
from schemas.status import ConditionType, JobPhase
from trainhub.producer import (
    LOG_ANSWER_TIMEOUT,
    POD_ANSWER_TIMEOUT,
    LogsUnanswered,
    PodsUnanswered,
    request_logs,
    request_pods,
)
from trainhub.sdk_errors import JobFailedError, JobTimeoutError, LogsUnavailableError
from trainhub.sdk_pods import JobPod, job_pods, with_phases
from trainhub.sdk_stream import Positions, StatusEvent, stream_status
from trainhub.sdk_view import StatusFollower, StatusView, TrainHubJob

_CONDITIONS = {c.value for c in ConditionType}
_LOGS_TIMEOUT = 60.0
"""Seconds a worker has to send the logs asked for without `follow`."""
_REPLICA_TYPES = frozenset(t.lower() for c in JOB_CLASSES.values() for t in c.REPLICA_TYPES)
_PODLESS = frozenset({JobPhase.QUEUED, JobPhase.DELETED, JobPhase.REJECTED, JobPhase.SKIPPED})
"""A job in these phases has no pods on any cluster: no worker is asked for their phases."""

log = logging.getLogger(__name__)


class FollowingCalls:
    """Part of `AsyncTrainHubClient`: the calls that follow jobs, on the client's connection
    and its view of the status topic."""

    topics: Topics

    async def _connected(self) -> tuple[Bus, StatusFollower]:
        raise NotImplementedError

    async def _fresh(self) -> StatusView:
        raise NotImplementedError

    def _resolve(self, view: StatusView, name: str, namespace: str | None) -> str:
        raise NotImplementedError

    def _current(self, view: StatusView, uid: str) -> TrainHubJob | None:
        raise NotImplementedError

    async def get_job(self, name: str, namespace: str | None = None) -> TrainHubJob:
        raise NotImplementedError

    # -- pods ---------------------------------------------------------------------------

    async def get_job_pods(
        self,
        name: str,
        namespace: str | None = None,
        *,
        is_master: bool = False,
        replica_type: str | None = None,
        replica_index: int | None = None,
        phase_timeout: float | None = POD_ANSWER_TIMEOUT,
    ) -> list[JobPod]:
        """The pods of the job's current run, with the cluster they run on (None while the
        job is placed nowhere) and their phases. Like Kubeflow's, `is_master` keeps only the
        master pod and `replica_type` (any case) and `replica_index` filter.

        Named from the job document on the status topic as every worker names them
        (`<job>-<replica type>-<index>` on kube, local and sim backends alike); phased by one
        round trip to the worker of the job's cluster (`pods.requested` on its assignments
        topic, answered on the logs topic). A worker that does not answer within
        `phase_timeout` seconds leaves every `phase` None (logged as a warning), as does a
        job placed nowhere; `phase_timeout=None` asks no worker. `JobPodsUnknownError` when
        the topic no longer holds the job's document; a `replica_type` that no kind has is a
        `ValueError`, as upstream's."""
        if phase_timeout is not None and (
            isinstance(phase_timeout, bool) or not isinstance(phase_timeout, int | float)
        ):
            raise ValueError(f"phase_timeout: seconds, or None (got {phase_timeout!r})")
        _check_filters(replica_type, replica_index)
        job = await self.get_job(name, namespace)
        pods = _picked(job_pods(job), is_master, replica_type, replica_index)
        if not pods or phase_timeout is None:
            return pods
        return with_phases(pods, await self._listed_pods(job, phase_timeout))

    async def _listed_pods(
        self, job: TrainHubJob, answer_timeout: float
    ) -> dict[str, ListedPod] | None:
        """The job's pods as the worker of its cluster lists them, by name; None when the job
        is placed nowhere or the worker did not answer."""
        if job.cluster is None or job.phase is None or job.phase in _PODLESS:
            return None
        bus, _ = await self._connected()
        request = PodsRequested(
            request_id=str(uuid.uuid4()),
            uid=job.uid,
            # Past it the worker drops the request; the margin covers clocks that differ.
            deadline=datetime.now(UTC) + timedelta(seconds=max(0.0, answer_timeout) + 30),
        )
        try:
            answer = await request_pods(
                bus, self.topics, job.cluster, request, answer_timeout=answer_timeout
            )
        except (PodsUnanswered, BusError) as exc:
            # Pod names still help (logs by pod); a caller of before phases keeps working.
            log.warning("the phases of job %s's pods are unknown: %s", job.key, exc)
            return None
        if answer.error is not None:
            log.debug("the worker knows no pods of job %s: %s", job.key, answer.error)
        return {pod.name: pod for pod in answer.pods}

    async def get_job_pod_names(
        self,
        name: str,
        namespace: str | None = None,
        *,
        is_master: bool = False,
        replica_type: str | None = None,
        replica_index: int | None = None,
    ) -> list[str]:
        """The names of `get_job_pods`, from the job document alone (no worker is asked;
        what `get_job_logs(pod=...)` takes)."""
        pods = await self.get_job_pods(
            name,
            namespace,
            is_master=is_master,
            replica_type=replica_type,
            replica_index=replica_index,
            phase_timeout=None,
        )
        return [pod.name for pod in pods]

    async def wait_for_job_conditions(
        self,
        name: str,
        namespace: str | None = None,
        expected_conditions: Iterable[str] = frozenset({ConditionType.SUCCEEDED.value}),
        timeout: float = 600,
        polling_interval: float = 1.0,
        callback: Callable[[TrainHubJob], Any] | None = None,
    ) -> TrainHubJob:
        """Wait until one of `expected_conditions` is True and return the job.

        Raises `JobFailedError` when the job fails (or ends as Rejected, Deleted or Skipped)
        and that was not expected, and `JobTimeoutError` (a `TimeoutError`) after `timeout`
        seconds. A job not on the status topic yet is waited for. `callback` gets the job at
        every change; `polling_interval` bounds the wait between two looks at it."""
        if isinstance(expected_conditions, str):
            expected_conditions = {expected_conditions}  # one condition, not its letters
        if not isinstance(timeout, int | float) or math.isnan(timeout) or timeout < 0:
            raise ValueError(f"timeout: seconds to wait (got {timeout!r})")
        expected = set(expected_conditions or ())
        unknown = expected - _CONDITIONS
        if unknown or not expected:
            raise ValueError(
                f"expected_conditions must be some of {sorted(_CONDITIONS)} "
                f"(got {sorted(expected)})"
            )
        _, follower = await self._connected()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        job: TrainHubJob | None = None
        # Fresh once; after that the reader applies every update as it comes and wakes us.
        view = await follower.fresh()
        while True:
            job = self._current(view, self._resolve(view, name, namespace)) or job
            if job is not None and job.phase is not None:
                if callback is not None:
                    callback(job)
                if any(job.has_condition(c) for c in expected):
                    return job
                if job.phase != JobPhase.SUCCEEDED and (
                    job.has_condition(ConditionType.FAILED) or job.finished
                ):
                    # A success that was not waited for is no failure: the wait runs on
                    # to its timeout, as upstream's.
                    phase = job.phase.value
                    raise JobFailedError(
                        f"job {job.key} is {phase}: {job.reason or ''} {job.message or ''}".strip(),
                        job,
                    )
            remaining = deadline - loop.time()
            if remaining <= 0:
                state = job.phase.value if job is not None and job.phase else "unknown"
                raise JobTimeoutError(
                    f"job {name} did not reach {sorted(expected)} within {timeout:g}s "
                    f"(it is {state})",
                    job,
                )
            await follower.changed(min(polling_interval, remaining))

    # -- logs -----------------------------------------------------------------------------

    async def stream_job_logs(
        self,
        name: str,
        namespace: str | None = None,
        *,
        follow: bool = True,
        pod: str | None = None,
        tail_lines: int | None = None,
        timeout: float = 3600,
        answer_timeout: float = LOG_ANSWER_TIMEOUT,
    ) -> AsyncGenerator[LogsChunk, None]:
        """The job's log text as its worker sends it: chunks of one pod's output each, in
        order. With `follow`, until the job finishes or `timeout` seconds passed (a job not
        placed yet is waited for); without, what the pods wrote so far.

        `LogsUnavailableError` when the job runs nowhere or its worker cannot answer."""
        if tail_lines is not None and (
            not isinstance(tail_lines, int) or isinstance(tail_lines, bool) or tail_lines < 0
        ):
            raise ValueError(f"tail_lines must be 0 or more lines (got {tail_lines!r})")
        bus, follower = await self._connected()
        job = await self.get_job(name, namespace)
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + (timeout if follow else _LOGS_TIMEOUT)
        while job.cluster is None or job.phase in (None, JobPhase.QUEUED, JobPhase.SUSPENDED):
            if not follow or job.finished or loop.time() >= stop_at:
                state = job.phase.value if job.phase else "submitted"
                where = (
                    "its pods are deleted until it is resumed"
                    if job.phase == JobPhase.SUSPENDED and job.cluster is not None
                    else "it runs on no cluster"
                )
                raise LogsUnavailableError(f"job {job.key} is {state}: {where}")
            await follower.changed(min(1.0, stop_at - loop.time()))
            job = await self.get_job(name, namespace)
        if job.phase == JobPhase.DELETED:
            # Its worker deleted the pods with the job: asking it would only say "no pods".
            raise LogsUnavailableError(f"job {job.key} is Deleted: its pods are gone")
        request_ = LogsRequested(
            request_id=str(uuid.uuid4()),
            uid=job.uid,
            pod=pod,
            tail_lines=tail_lines,
            follow=follow,
            deadline=datetime.now(UTC) + timedelta(seconds=max(1.0, stop_at - loop.time())),
        )
        try:
            async for chunk in request_logs(
                bus, self.topics, job.cluster, request_, answer_timeout=answer_timeout
            ):
                if chunk.error is not None:
                    raise LogsUnavailableError(chunk.error)
                if chunk.pod is not None and chunk.text:
                    yield chunk
        except LogsUnanswered as exc:
            raise LogsUnavailableError(str(exc)) from exc

    async def get_job_logs(
        self,
        name: str,
        namespace: str | None = None,
        *,
        follow: bool = False,
        pod: str | None = None,
        tail_lines: int | None = None,
        timeout: float = 3600,
        is_master: bool = False,
        replica_type: str | None = None,
        replica_index: int | None = None,
    ) -> dict[str, str]:
        """Pod name -> log text, from the worker of the job's cluster. With `follow`, returns
        once the job finished (see `stream_job_logs` to see the text as it comes).
        `is_master`, `replica_type` and `replica_index` pick pods as `get_job_pods` does
        (upstream's filters; every pod by default)."""
        wanted: set[str] | None = None
        if is_master or replica_type is not None or replica_index is not None:
            wanted = set(
                await self.get_job_pod_names(
                    name,
                    namespace,
                    is_master=is_master,
                    replica_type=replica_type,
                    replica_index=replica_index,
                )
            )
        logs: dict[str, str] = {}
        async for chunk in self.stream_job_logs(
            name, namespace, follow=follow, pod=pod, tail_lines=tail_lines, timeout=timeout
        ):
            assert chunk.pod is not None
            if wanted is None or chunk.pod in wanted:
                logs[chunk.pod] = logs.get(chunk.pod, "") + chunk.text
        return logs

    async def stream(
        self,
        job: str | None = None,
        namespace: str | None = None,
        *,
        queue: str | None = None,
        from_offset: Positions | None = None,
        from_time: datetime | float | None = None,
        follow: bool = True,
    ) -> AsyncGenerator[StatusEvent, None]:
        """Status events of one job, of one queue or of every job, from the beginning of the
        status topic, from `from_time` (a datetime or seconds since the epoch), or right
        after `from_offset`: the positions of the last events handled, partition -> offset,
        as `event.position` gives them. A pipeline keeps `positions[p] = offset` with what it
        handled and passes that dict after a restart: nothing is lost, nothing repeated.
        Without `follow` the stream ends at the end of the topic."""
        if from_time is not None and (
            isinstance(from_time, bool) or not isinstance(from_time, datetime | int | float)
        ):
            raise ValueError(
                f"from_time: a datetime or seconds since the epoch (got {from_time!r})"
            )
        if from_offset is not None and (
            not isinstance(from_offset, Mapping)
            or not all(_whole(p) and _whole(o) for p, o in from_offset.items())
        ):
            raise ValueError(
                f"from_offset: partition -> offset, as event.position gives (got {from_offset!r})"
            )
        bus, _ = await self._connected()
        view = await self._fresh()
        uids = {self._resolve(view, job, namespace)} if job is not None else None
        since = (
            datetime.fromtimestamp(from_time, UTC)
            if isinstance(from_time, int | float)
            else from_time
        )
        queues = {uid: j.queue for uid, j in view.jobs.items()}
        async for event in stream_status(
            bus,
            self.topics,
            uids=uids,
            queue=queue,
            queues=queues,
            from_offset=from_offset,
            from_time=since,
            follow=follow,
        ):
            yield event


def _check_filters(replica_type: object, replica_index: object) -> None:
    """A `replica_type` or `replica_index` no pod could have is a `ValueError`."""
    if replica_type is not None and (
        not isinstance(replica_type, str) or replica_type.lower() not in _REPLICA_TYPES
    ):
        raise ValueError(
            f"replica_type {replica_type!r} is none of the Kubeflow replica types "
            f"({', '.join(sorted(_REPLICA_TYPES))})"
        )
    if replica_index is not None and (
        not isinstance(replica_index, int) or isinstance(replica_index, bool) or replica_index < 0
    ):
        raise ValueError(f"replica_index: a replica's index, 0 or more (got {replica_index!r})")


def _picked(
    pods: list[JobPod], is_master: bool, replica_type: str | None, replica_index: int | None
) -> list[JobPod]:
    """Upstream's filters."""
    return [
        pod
        for pod in pods
        if (not is_master or pod.is_master)
        and (replica_type is None or pod.replica_type.lower() == replica_type.lower())
        and (replica_index is None or pod.replica_index == replica_index)
    ]


def _whole(value: object) -> bool:
    """An int, or its digits as JSON keys bring them back (positions saved with json)."""
    if isinstance(value, str):
        return value.isdigit()
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
