"""The Python SDK, modelled on Kubeflow's `TrainingClient` but over the bus: jobs are created
on the jobs topic, their state comes from the status topic and their logs from the worker of
whichever cluster runs them. `AsyncTrainHubClient` is the asyncio flavour; `TrainHubClient`
runs it on an event loop thread of its own, so it works from any code, notebooks included."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import functools
import math
import os
import queue
import threading
import uuid
import weakref
from collections.abc import (
    AsyncGenerator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from bus.base import Bus
from dispatcher.job_updates import update_problem
from schemas.cluster import ClusterSnapshot
from schemas.events import EventType, LogsChunk, LogsRequested
from schemas.job_parsing import load_documents, parse_job, read_text
from schemas.kubeflow import JOB_CLASSES, derive_job_uid
from schemas.names import DNS1123_LABEL
from schemas.run_policy import TRAINHUB_MANAGER
from schemas.status import INVALID, ConditionType, JobCondition, JobPhase
from trainhub.bus_factory import make_bus
from trainhub.job_checks import validate_job
from trainhub.producer import (
    LOG_ANSWER_TIMEOUT,
    LogsUnanswered,
    read_clusters,
    request,
    request_logs,
    submit_with_id,
    update_document,
)
from trainhub.sdk_errors import (
    ClientClosedError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    JobUpdateError,
    LogsUnavailableError,
)
from trainhub.sdk_functions import DEFAULT_BACKOFF_LIMIT, DEFAULT_BASE_IMAGE, job_from_function
from trainhub.sdk_pods import JobPod, job_pods
from trainhub.sdk_stream import DEFAULT_QUEUE, Positions, StatusEvent, stream_status
from trainhub.sdk_view import StatusFollower, StatusView, TrainHubJob
from trainhub.settings import TrainhubSettings, load_settings

JobSource = Mapping[str, Any] | str | Path
"""A job document, or the path of a YAML/JSON file holding one."""

_CONDITIONS = {c.value for c in ConditionType}
_LOGS_TIMEOUT = 60.0
"""Seconds a worker has to send the logs asked for without `follow`."""


def looked_for(name: str, namespace: str) -> str:
    """How a not-found error names the job a lookup of `name` searched for: a uid or
    NAMESPACE/NAME as given, a bare NAME in `namespace` (or taken as a uid)."""
    if "/" in name:
        return repr(name)
    return f"'{namespace}/{name}' (nor of uid {name!r})"


class AsyncTrainHubClient:
    """Create, watch, read the logs of and control training jobs on any member cluster.

    Settings come from the arguments, else the `TRAINHUB_*` variables, else the YAML file
    `config` (or `TRAINHUB_CONFIG`): the same names and precedence as the CLI. Pass `bus` to
    use a bus you started yourself (the in-memory one of an embedded runner, say).
    `create_topics=False` makes a client that never creates trainhub's topics: where they do
    not exist (no hub or worker has created them with that prefix yet, or it is mistyped) a
    call raises a `BusError` naming the missing topic instead.

    The client connects on first use; `async with` (or `close()`) releases the connection.
    Job state comes from a reader that follows the status topic in the background, so every
    call answers from memory once the view holds what the topic held when the call began.
    """

    def __init__(
        self,
        bootstrap: str | None = None,
        topic_prefix: str | None = None,
        *,
        config: str | Path | None = None,
        settings: TrainhubSettings | None = None,
        bus: Bus | None = None,
        namespace: str = "default",
        create_topics: bool = True,
        **overrides: Any,
    ) -> None:
        if settings is None:
            config = config or os.environ.get("TRAINHUB_CONFIG") or None
            settings = load_settings(
                Path(config) if config else None,
                bootstrap=bootstrap,
                topic_prefix=topic_prefix,
                **overrides,
            )
        elif bootstrap or topic_prefix or config or overrides:
            raise ValueError("pass either settings or individual settings, not both")
        if (
            not isinstance(namespace, str)
            or len(namespace) > 63
            or not DNS1123_LABEL.match(namespace)
        ):
            raise ValueError(f"namespace: {namespace!r} is not a DNS-1123 label")
        self.settings = settings
        self.topics = settings.topics()
        self.namespace = namespace
        """The namespace of job names given without one."""
        self._bus = bus
        self._owns_bus = bus is None
        self._create_topics = create_topics
        self._follower: StatusFollower | None = None
        self._start_lock = asyncio.Lock()
        self._pending: dict[str, TrainHubJob] = {}
        """Jobs this client submitted that the hub has not acknowledged yet, by uid."""

    # -- connection -----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and start following the status topic (done by the first call anyway)."""
        async with self._start_lock:
            if self._follower is not None:
                return
            bus = self._bus or make_bus(self.settings)
            if self._owns_bus:
                await bus.start()
            try:
                if self._create_topics:
                    await bus.create_topics(self.topics.shared_specs())
                follower = StatusFollower(bus, self.topics)
                await follower.start()
            except BaseException:
                if self._owns_bus:
                    await bus.close()
                raise
            self._bus, self._follower = bus, follower

    async def close(self) -> None:
        async with self._start_lock:
            if self._follower is not None:
                await self._follower.stop()
                self._follower = None
            if self._owns_bus and self._bus is not None:
                await self._bus.close()
                self._bus = None

    async def __aenter__(self) -> AsyncTrainHubClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _connected(self) -> tuple[Bus, StatusFollower]:
        if self._follower is None:
            await self.start()
        assert self._bus is not None and self._follower is not None
        return self._bus, self._follower

    async def _fresh(self) -> StatusView:
        _, follower = await self._connected()
        return await follower.fresh()

    # -- creating -------------------------------------------------------------------------

    async def create_job(
        self,
        job: JobSource | None = None,
        *,
        name: str | None = None,
        namespace: str | None = None,
        train_func: Callable[..., Any] | None = None,
        parameters: Mapping[str, Any] | None = None,
        num_workers: int = 1,
        num_procs_per_worker: int | str | None = None,
        resources_per_worker: Mapping[str, Any] | None = None,
        env_vars: Mapping[str, Any] | Sequence[Any] | None = None,
        base_image: str = DEFAULT_BASE_IMAGE,
        packages_to_install: Sequence[str] | None = None,
        pip_index_url: str | None = None,
        queue: str | None = None,
        restart_policy: str = "OnFailure",
        backoff_limit: int | None = DEFAULT_BACKOFF_LIMIT,
    ) -> str:
        """Submit a job and return its uid.

        Either `job` (a Kubeflow v1 document or a file; `name`, `namespace` and `queue`
        override its own, and an unset `runPolicy.managedBy` becomes trainhub's), or
        `train_func`: a self-contained function (imports inside) that becomes a PyTorchJob
        with a Master and `num_workers - 1` Workers, run under `torchrun` when
        `num_workers > 1` or `num_procs_per_worker` is set and under `python -u` otherwise,
        called with `parameters` as keyword arguments. `resources_per_worker` is requests and
        limits per pod (`gpu` means `nvidia.com/gpu`), `env_vars` its environment,
        `packages_to_install` is pip-installed first.

        The job is validated here (`ValueError` naming the field), and `JobExistsError` says
        that a job of that name exists and is not deleted."""
        if (job is None) == (train_func is None):
            raise ValueError("pass exactly one of job and train_func")
        if train_func is not None:
            if not name:
                raise ValueError("a job made from train_func needs a name")
            document = job_from_function(
                train_func,
                name=name,
                namespace=namespace or self.namespace,
                parameters=parameters,
                num_workers=num_workers,
                num_procs_per_worker=num_procs_per_worker,
                resources_per_worker=resources_per_worker,
                env_vars=env_vars,
                base_image=base_image,
                packages_to_install=packages_to_install,
                pip_index_url=pip_index_url,
                queue=queue,
                restart_policy=restart_policy,
                backoff_limit=backoff_limit,
            )
        else:
            assert job is not None
            document = _document(
                job, name=name, namespace=namespace, queue=queue, default=self.namespace
            )
        parsed = validate_job(document)
        view = await self._fresh()
        existing = self._current(view, parsed.uid)
        if (
            existing is not None
            and existing.phase != JobPhase.DELETED
            and not (existing.phase == JobPhase.REJECTED and existing.reason == INVALID)
        ):
            state = existing.phase.value if existing.phase else "just submitted"
            raise JobExistsError(f"job {parsed.key} already exists ({state}); delete it first")
        bus, _ = await self._connected()
        uid, submission = await submit_with_id(bus, self.topics, document)
        run_policy = parsed.run_policy
        self._pending[uid] = TrainHubJob(
            uid=uid,
            name=parsed.metadata.name,
            namespace=parsed.metadata.namespace,
            kind=parsed.kind,
            framework=parsed.FRAMEWORK,
            queue=run_policy.schedulingPolicy.queue if run_policy.schedulingPolicy else None,
            spec=document,
            submission=submission,
            created=datetime.now(UTC),
        )
        return uid

    async def update_job(
        self,
        job: JobSource,
        name: str | None = None,
        namespace: str | None = None,
    ) -> str:
        """Replace a job's spec with `job` (a document or file; `name` and `namespace`
        override its own, as in `create_job`), as upstream's `update_job` patches the
        Kubeflow object; returns the job's uid.

        The spec changes freely while the job has no pods: queued, held suspended, or
        suspended in its cluster (it is then placed again, with the new spec, when resumed).
        A job whose pods exist may only be suspended (`runPolicy.suspend: true`). An explicit
        `runPolicy.suspend` holds or resumes the job; left out, the job stays as it is.
        `JobUpdateError` says why an update cannot apply (finished job, another kind or
        manager, a running job's pods); `JobNotFoundError` that there is no such job. The
        hub applies it with a status of reason `Updated` (with the new spec)."""
        document = _document(
            job, name=name, namespace=namespace, queue=None, default=self.namespace
        )
        parsed = validate_job(document)
        view = await self._fresh()
        existing = self._current(view, parsed.uid)
        if existing is None or existing.phase == JobPhase.DELETED:
            raise JobNotFoundError(f"no job {parsed.key} to update (create it instead)")
        if existing.phase is not None:  # None: just submitted; the hub judges it in order
            current = parse_job(existing.spec) if existing.spec else None
            problem = update_problem(current, existing.phase, parsed)
            if problem is not None:
                raise JobUpdateError(problem)
        bus, _ = await self._connected()
        return await update_document(bus, self.topics, document)

    # -- reading --------------------------------------------------------------------------

    def _resolve(self, view: StatusView, name: str, namespace: str | None) -> str:
        """The uid of a job given by name (in `namespace`), `NAMESPACE/NAME` or uid."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"name: a job's name, NAMESPACE/NAME or uid (got {name!r})")
        if name in view.jobs or name in self._pending:
            return name
        space, _, bare = name.rpartition("/")
        space = space or namespace or self.namespace
        for uid, pending in self._pending.items():
            if pending.name == bare and pending.namespace == space:
                return uid
        named = [j for j in view.jobs.values() if j.name == bare and j.namespace == space]
        if named:
            return max(named, key=lambda j: j.updated or datetime.min.replace(tzinfo=UTC)).uid
        return derive_job_uid(space, bare)

    def _current(self, view: StatusView, uid: str) -> TrainHubJob | None:
        """The job's current run: this client's submission until the hub answered it."""
        job = view.jobs.get(uid)
        pending = self._pending.get(uid)
        if pending is None:
            return job
        if job is not None and job.submission == pending.submission:
            del self._pending[uid]
            return job
        if pending.submission in view.refused:
            del self._pending[uid]
            raise JobExistsError(f"the hub refused {pending.key}: a job of that name exists")
        return pending

    async def get_job(self, name: str, namespace: str | None = None) -> TrainHubJob:
        """The job as the status topic has it (a deleted one shows phase Deleted until it
        is created again); `JobNotFoundError` when the topic has no such job."""
        view = await self._fresh()
        job = self._current(view, self._resolve(view, name, namespace))
        if job is None:
            searched = looked_for(name, namespace or self.namespace)
            raise JobNotFoundError(f"no job {searched} on the status topic")
        return job

    async def list_jobs(
        self, namespace: str | None = None, queue: str | None = None
    ) -> list[TrainHubJob]:
        """Every job not deleted (of a namespace, of a queue), by namespace and name."""
        view = await self._fresh()
        jobs: list[TrainHubJob] = []
        for uid in {*view.jobs, *self._pending}:
            try:
                job = self._current(view, uid)
            except JobExistsError:
                job = view.jobs.get(uid)
            if job is None or job.phase == JobPhase.DELETED:
                continue
            if namespace is not None and job.namespace != namespace:
                continue
            if queue is not None and (job.queue or DEFAULT_QUEUE) != queue:
                continue
            jobs.append(job)
        return sorted(jobs, key=lambda j: (j.namespace or "", j.name or "", j.uid))

    async def get_job_conditions(
        self, name: str, namespace: str | None = None
    ) -> list[JobCondition]:
        """The job's Kubeflow conditions: `Created` once the hub admitted it (and `Suspended`
        while it holds the job), then the ones its worker reports."""
        return list((await self.get_job(name, namespace)).conditions)

    async def is_job_created(self, name: str, namespace: str | None = None) -> bool:
        return (await self.get_job(name, namespace)).has_condition(ConditionType.CREATED)

    async def is_job_running(self, name: str, namespace: str | None = None) -> bool:
        return (await self.get_job(name, namespace)).has_condition(ConditionType.RUNNING)

    async def is_job_restarting(self, name: str, namespace: str | None = None) -> bool:
        return (await self.get_job(name, namespace)).has_condition(ConditionType.RESTARTING)

    async def is_job_succeeded(self, name: str, namespace: str | None = None) -> bool:
        return (await self.get_job(name, namespace)).has_condition(ConditionType.SUCCEEDED)

    async def is_job_failed(self, name: str, namespace: str | None = None) -> bool:
        """True for a Failed condition, and for a job the hub rejected."""
        return (await self.get_job(name, namespace)).has_condition(ConditionType.FAILED)

    # -- pods ---------------------------------------------------------------------------

    async def get_job_pods(
        self,
        name: str,
        namespace: str | None = None,
        *,
        is_master: bool = False,
        replica_type: str | None = None,
        replica_index: int | None = None,
    ) -> list[JobPod]:
        """The pods of the job's current run, with the cluster they run on (None while the
        job is placed nowhere). Like Kubeflow's, `is_master` keeps only the master pod and
        `replica_type` (any case) and `replica_index` filter.

        Named from the job document on the status topic as every worker names them
        (`<job>-<replica type>-<index>` on kube, local and sim backends alike); per-pod phases
        are not on the bus, `job.status.replicaStatuses` counts them per replica type.
        `JobPodsUnknownError` when the topic no longer holds the job's document; a
        `replica_type` that no kind has is a `ValueError`, as upstream's."""
        if replica_type is not None and (
            not isinstance(replica_type, str) or replica_type.lower() not in _REPLICA_TYPES
        ):
            raise ValueError(
                f"replica_type {replica_type!r} is none of the Kubeflow replica types "
                f"({', '.join(sorted(_REPLICA_TYPES))})"
            )
        if replica_index is not None and (
            not isinstance(replica_index, int)
            or isinstance(replica_index, bool)
            or replica_index < 0
        ):
            raise ValueError(f"replica_index: a replica's index, 0 or more (got {replica_index!r})")
        pods = job_pods(await self.get_job(name, namespace))
        return [
            pod
            for pod in pods
            if (not is_master or pod.is_master)
            and (replica_type is None or pod.replica_type.lower() == replica_type.lower())
            and (replica_index is None or pod.replica_index == replica_index)
        ]

    async def get_job_pod_names(
        self,
        name: str,
        namespace: str | None = None,
        *,
        is_master: bool = False,
        replica_type: str | None = None,
        replica_index: int | None = None,
    ) -> list[str]:
        """The names of `get_job_pods` (what `get_job_logs(pod=...)` takes)."""
        pods = await self.get_job_pods(
            name,
            namespace,
            is_master=is_master,
            replica_type=replica_type,
            replica_index=replica_index,
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

    # -- controlling ----------------------------------------------------------------------

    async def _request(self, name: str, namespace: str | None, event_type: str) -> TrainHubJob:
        job = await self.get_job(name, namespace)
        bus, _ = await self._connected()
        await request(bus, self.topics, event_type, job.uid)
        return job

    async def suspend_job(self, name: str, namespace: str | None = None) -> None:
        """Delete the job's pods until it is resumed (it keeps its place)."""
        await self._request(name, namespace, EventType.JOB_SUSPENDED)

    async def resume_job(self, name: str, namespace: str | None = None) -> None:
        await self._request(name, namespace, EventType.JOB_RESUMED)

    async def delete_job(self, name: str, namespace: str | None = None) -> None:
        """Delete the job wherever it runs; its name is free again once it shows Deleted."""
        job = await self._request(name, namespace, EventType.JOB_DELETED)
        self._pending.pop(job.uid, None)

    # -- clusters and the status stream ---------------------------------------------------

    async def list_clusters(self, window: float = 30.0) -> list[ClusterSnapshot]:
        """The newest heartbeat of every member cluster, by name; one that two worker
        processes reported in turns within `window` seconds is unhealthy, with the reason."""
        if isinstance(window, bool) or not isinstance(window, int | float) or not window >= 0:
            raise ValueError(f"window: seconds, 0 or more (got {window!r})")
        bus, _ = await self._connected()
        clusters = await read_clusters(bus, self.topics, window)
        return [clusters[name] for name in sorted(clusters)]

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


_REPLICA_TYPES = frozenset(t.lower() for c in JOB_CLASSES.values() for t in c.REPLICA_TYPES)


def _document(
    job: JobSource,
    *,
    name: str | None,
    namespace: str | None,
    queue: str | None,
    default: str | None = None,
) -> dict[str, Any]:
    """The job as a document with the overrides; `default`: the namespace of a document
    that names none (the client's, as upstream creates it in)."""
    if isinstance(job, str | Path):
        path = Path(job)
        documents = load_documents(read_text(path), str(path))
        if len(documents) != 1 or not isinstance(documents[0], dict):
            raise ValueError(f"{path}: expected exactly one job document")
        document: dict[str, Any] = documents[0]
    elif isinstance(job, Mapping):
        document = copy.deepcopy(dict(job))
    else:
        raise ValueError(f"job: a job document (mapping) or a file path (got {type(job).__name__})")
    metadata = document.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError("metadata: expected a mapping")
    if name is not None:
        metadata["name"] = name
    if namespace is not None:
        metadata["namespace"] = namespace
    elif default is not None and not metadata.get("namespace"):
        metadata["namespace"] = default
    spec = document.setdefault("spec", {})
    if not isinstance(spec, dict):
        raise ValueError("spec: expected a mapping")
    run_policy = spec.setdefault("runPolicy", {})
    if not isinstance(run_policy, dict):
        raise ValueError("spec.runPolicy: expected a mapping")
    # Given to the trainhub SDK, the job is meant for trainhub; another manager set on
    # purpose is respected (the hub then records the job and leaves it alone).
    run_policy.setdefault("managedBy", TRAINHUB_MANAGER)
    if queue is not None:
        scheduling = run_policy.setdefault("schedulingPolicy", {})
        if not isinstance(scheduling, dict):
            raise ValueError("spec.runPolicy.schedulingPolicy: expected a mapping")
        scheduling["queue"] = queue
    return document


# -- the blocking client ----------------------------------------------------------------

_P = ParamSpec("_P")
_T = TypeVar("_T")


class _LoopThread:
    """An event loop on a daemon thread; blocking calls run coroutines on it.

    Closing cancels the calls other threads are blocked in (they raise `ClientClosedError`)
    and closes the streams left open, so no thread waits for ever on a stopped loop."""

    _UNWIND = 5.0
    """Seconds a cancelled call may take to unwind before its caller goes on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="trainhub-sdk", daemon=True
        )
        self._thread.start()
        self._lock = threading.Lock()
        self._calls: set[concurrent.futures.Future[Any]] = set()
        self._streams: weakref.WeakSet[AsyncGenerator[Any, None]] = weakref.WeakSet()
        self.closed = False

    def submit(
        self, coro: Coroutine[Any, Any, _T]
    ) -> tuple[concurrent.futures.Future[_T], threading.Event]:
        """The call running on the loop, and an event set once it has unwound."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking TrainHubClient call from its own event loop")
        settled = threading.Event()

        async def tracked() -> _T:
            try:
                return await coro
            finally:
                settled.set()

        with self._lock:
            if self.closed:
                coro.close()
                raise ClientClosedError("the client is closed")
            future = asyncio.run_coroutine_threadsafe(tracked(), self.loop)
            self._calls.add(future)
        future.add_done_callback(self._calls.discard)
        return future, settled

    def result(self, future: concurrent.futures.Future[_T], settled: threading.Event) -> _T:
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if self.closed:
                raise ClientClosedError("the client was closed during the call") from None
            raise
        except BaseException:
            self.abandon(future, settled)  # e.g. KeyboardInterrupt
            raise

    def abandon(self, future: concurrent.futures.Future[Any], settled: threading.Event) -> None:
        """Stop a call, and let it unwind before going on (a stream's generator is still
        running until then, and cannot be closed)."""
        future.cancel()
        settled.wait(self._UNWIND)

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self.result(*self.submit(coro))

    def iterate(self, items: AsyncGenerator[_T, None]) -> Iterator[_T]:
        self._streams.add(items)

        async def step() -> _T:
            return await items.__anext__()

        try:
            while True:
                try:
                    item = self.run(step())
                except StopAsyncIteration:
                    return
                yield item
        finally:
            if not self.closed and not _running(items):
                with contextlib.suppress(ClientClosedError):
                    self.run(items.aclose())

    def close(self, last: Coroutine[Any, Any, None]) -> None:
        """Cancel the calls in progress, close the open streams, run `last` (the client's
        close) and stop the loop."""
        with self._lock:
            if self.closed:
                last.close()
                return
            self.closed = True
            calls = list(self._calls)
        for call in calls:
            call.cancel()
        streams = list(self._streams)

        async def finish() -> None:
            await asyncio.sleep(0)  # the cancelled calls unwind first
            for stream in streams:
                if not _running(stream):
                    with contextlib.suppress(Exception):
                        await stream.aclose()
            await last

        if threading.current_thread() is self._thread or self.loop.is_closed():
            last.close()  # collected on its own loop thread: it stops without a goodbye
        else:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(finish(), self.loop).result(self._UNWIND * 6)
        self.stop()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()
            self.loop.close()


def _whole(value: object) -> bool:
    """An int, or its digits as JSON keys bring them back (positions saved with json)."""
    if isinstance(value, str):
        return value.isdigit()
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _running(stream: AsyncGenerator[Any, None]) -> bool:
    """Whether the generator is in a step now (it cannot be closed then)."""
    return bool(getattr(stream, "ag_running", False))


def _shut_down(loop: _LoopThread, client: AsyncTrainHubClient) -> None:
    """Close the client and stop its thread: on `close()`, when the blocking client is
    collected, or at interpreter exit (while the thread still runs: atexit time)."""
    loop.close(client.close())


def _blocking(
    method: Callable[Concatenate[AsyncTrainHubClient, _P], Coroutine[Any, Any, _T]],
) -> Callable[Concatenate[TrainHubClient, _P], _T]:
    @functools.wraps(method)
    def call(self: TrainHubClient, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self._loop.run(method(self.aio, *args, **kwargs))

    return call


def _blocking_iter(
    method: Callable[Concatenate[AsyncTrainHubClient, _P], AsyncGenerator[_T, None]],
) -> Callable[Concatenate[TrainHubClient, _P], Iterator[_T]]:
    @functools.wraps(method)
    def call(self: TrainHubClient, /, *args: _P.args, **kwargs: _P.kwargs) -> Iterator[_T]:
        return self._loop.iterate(method(self.aio, *args, **kwargs))

    return call


class TrainHubClient:
    """The blocking client: the methods of `AsyncTrainHubClient`, each returning its result
    (streams become iterators). It keeps one connection and the background status reader on
    an event loop thread of its own; `close()` or `with` ends both."""

    def __init__(
        self,
        bootstrap: str | None = None,
        topic_prefix: str | None = None,
        *,
        config: str | Path | None = None,
        settings: TrainhubSettings | None = None,
        namespace: str = "default",
        **overrides: Any,
    ) -> None:
        self.aio = AsyncTrainHubClient(
            bootstrap,
            topic_prefix,
            config=config,
            settings=settings,
            namespace=namespace,
            **overrides,
        )
        self._loop = _LoopThread()
        self._finalizer = weakref.finalize(self, _shut_down, self._loop, self.aio)

    @property
    def settings(self) -> TrainhubSettings:
        return self.aio.settings

    def close(self) -> None:
        """Disconnect and stop the event loop thread (a client not closed is closed when it
        is collected or when the interpreter exits)."""
        self._finalizer()

    def __enter__(self) -> TrainHubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    start = _blocking(AsyncTrainHubClient.start)
    create_job = _blocking(AsyncTrainHubClient.create_job)
    update_job = _blocking(AsyncTrainHubClient.update_job)
    get_job = _blocking(AsyncTrainHubClient.get_job)
    list_jobs = _blocking(AsyncTrainHubClient.list_jobs)
    get_job_conditions = _blocking(AsyncTrainHubClient.get_job_conditions)
    get_job_pods = _blocking(AsyncTrainHubClient.get_job_pods)
    get_job_pod_names = _blocking(AsyncTrainHubClient.get_job_pod_names)
    is_job_created = _blocking(AsyncTrainHubClient.is_job_created)
    is_job_running = _blocking(AsyncTrainHubClient.is_job_running)
    is_job_restarting = _blocking(AsyncTrainHubClient.is_job_restarting)
    is_job_succeeded = _blocking(AsyncTrainHubClient.is_job_succeeded)
    is_job_failed = _blocking(AsyncTrainHubClient.is_job_failed)

    def wait_for_job_conditions(
        self,
        name: str,
        namespace: str | None = None,
        expected_conditions: Iterable[str] = frozenset({ConditionType.SUCCEEDED.value}),
        timeout: float = 600,
        polling_interval: float = 1.0,
        callback: Callable[[TrainHubJob], Any] | None = None,
    ) -> TrainHubJob:
        """`AsyncTrainHubClient.wait_for_job_conditions`, with `callback` called in this
        thread, as upstream's is: it may use the client, and a slow one holds up nobody else."""
        seen: queue.SimpleQueue[TrainHubJob] = queue.SimpleQueue()
        wait = self.aio.wait_for_job_conditions(
            name,
            namespace,
            expected_conditions,
            timeout,
            polling_interval,
            None if callback is None else seen.put,
        )
        future, settled = self._loop.submit(wait)
        if callback is not None:
            try:
                while not (future.done() and seen.empty()):
                    with contextlib.suppress(queue.Empty):
                        callback(seen.get(timeout=0.05))
            except BaseException:
                self._loop.abandon(future, settled)
                raise
        return self._loop.result(future, settled)

    get_job_logs = _blocking(AsyncTrainHubClient.get_job_logs)
    stream_job_logs = _blocking_iter(AsyncTrainHubClient.stream_job_logs)
    suspend_job = _blocking(AsyncTrainHubClient.suspend_job)
    resume_job = _blocking(AsyncTrainHubClient.resume_job)
    delete_job = _blocking(AsyncTrainHubClient.delete_job)
    list_clusters = _blocking(AsyncTrainHubClient.list_clusters)
    stream = _blocking_iter(AsyncTrainHubClient.stream)
