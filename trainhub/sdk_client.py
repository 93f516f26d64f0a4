"""`AsyncTrainHubClient`, the asyncio flavour of the SDK: its connection, creating and
updating jobs, reading them from the status topic and asking for their control; the calls
that follow running jobs come from `FollowingCalls`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bus.base import Bus
from bus.runtimes import apply_runtime, delete_runtime, read_runtimes
from dispatcher.job_updates import update_problem
from schemas.cluster import ClusterSnapshot
from schemas.events import EventType
from schemas.job_parsing import parse_placed_job
from schemas.kubeflow import AnyJob, derive_job_uid
from schemas.names import DNS1123_LABEL
from schemas.status import INVALID, ConditionType, JobCondition, JobPhase
from schemas.trainer import AnyRuntime
from schemas.trainer_runtimes import (
    BUS,
    CLUSTER_RUNTIME,
    NAMESPACED_RUNTIME,
    RuntimeCatalog,
    parse_runtime,
    shown_name,
)
from schemas.trainjob import UNKNOWN_RUNTIME
from trainhub.bus_factory import make_bus
from trainhub.job_checks import validate_job
from trainhub.producer import read_clusters, request, submit_with_id, update_document
from trainhub.sdk_documents import JobSource, job_document
from trainhub.sdk_errors import (
    JobExistsError,
    JobNotFoundError,
    JobUpdateError,
    RuntimeNotFoundError,
    looked_for,
)
from trainhub.sdk_following import FollowingCalls
from trainhub.sdk_functions import DEFAULT_BACKOFF_LIMIT, DEFAULT_BASE_IMAGE, job_from_function
from trainhub.sdk_stream import DEFAULT_QUEUE
from trainhub.sdk_view import StatusFollower, StatusView, TrainHubJob
from trainhub.settings import TrainhubSettings, load_settings


class AsyncTrainHubClient(FollowingCalls):
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
            document = job_document(
                job, name=name, namespace=namespace, queue=queue, default=self.namespace
            )
        parsed = await self._validated(document)
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
        A job whose pods exist may only be suspended (`runPolicy.suspend: true`; a TrainJob's
        `spec.suspend`). An explicit `suspend` holds or resumes the job; left out, the job
        stays as it is.
        `JobUpdateError` says why an update cannot apply (finished job, another kind or
        manager, a running job's pods); `JobNotFoundError` that there is no such job. The
        hub applies it with a status of reason `Updated` (with the new spec)."""
        document = job_document(
            job, name=name, namespace=namespace, queue=None, default=self.namespace
        )
        parsed = await self._validated(document)
        view = await self._fresh()
        existing = self._current(view, parsed.uid)
        if existing is None or existing.phase == JobPhase.DELETED:
            raise JobNotFoundError(f"no job {parsed.key} to update (create it instead)")
        if existing.phase is not None:  # None: just submitted; the hub judges it in order
            current = parse_placed_job(existing.spec, existing.runtime) if existing.spec else None
            problem = update_problem(current, existing.phase, parsed, existing.status)
            if problem is not None:
                raise JobUpdateError(problem)
        bus, _ = await self._connected()
        return await update_document(bus, self.topics, document)

    async def _validated(self, document: Any) -> AnyJob:
        """`validate_job`, a TrainJob's runtime looked up on the bus too when this process
        does not know it."""
        try:
            return validate_job(document)
        except ValueError as exc:
            if UNKNOWN_RUNTIME not in str(exc):
                raise
        return validate_job(document, await self.runtimes())

    # -- TrainJob runtimes ----------------------------------------------------------------

    async def runtimes(self) -> RuntimeCatalog:
        """The runtimes the hub knows: shipped < this process's files (`TRAINHUB_RUNTIMES`)
        < those applied on the bus (the runtimes topic, read to its end now)."""
        bus, _ = await self._connected()
        return await read_runtimes(bus, self.topics)

    async def apply_runtime(self, runtime: Mapping[str, Any] | AnyRuntime) -> str:
        """Validate a (Cluster)TrainingRuntime document by upstream's rules and publish it on
        the runtimes topic, replacing the one of its kind, namespace and name applied before
        (and overriding a shipped or file one). Returns its key (`KIND/NAMESPACE/NAME`);
        `ValueError` naming what is wrong, nothing published."""
        parsed = (
            runtime if not isinstance(runtime, Mapping) else parse_runtime(dict(runtime), "runtime")
        )
        bus, _ = await self._connected()
        return await apply_runtime(bus, self.topics, parsed)

    async def delete_runtime(
        self, name: str, *, kind: str = CLUSTER_RUNTIME, namespace: str | None = None
    ) -> None:
        """Delete a runtime applied on the bus (a tombstone); a shipped or file runtime of the
        same key is then the one known again. `RuntimeNotFoundError` when the bus has none."""
        if kind not in (CLUSTER_RUNTIME, NAMESPACED_RUNTIME):
            raise ValueError(f"kind: {CLUSTER_RUNTIME} or {NAMESPACED_RUNTIME} (got {kind!r})")
        key = (kind, (namespace or self.namespace) if kind == NAMESPACED_RUNTIME else "", name)
        catalog = await self.runtimes()
        if catalog.entries().get(key, (None, ""))[1] != BUS:
            raise RuntimeNotFoundError(
                f"no {shown_name(key)} applied on the bus (known runtimes: {catalog.known_text()})"
            )
        bus, _ = await self._connected()
        await delete_runtime(bus, self.topics, key)

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
