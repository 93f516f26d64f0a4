"""Part of `TrainingClient`: its plumbing (a `TrainHubClient` call bounded by upstream's
`timeout`, failures as upstream's `RuntimeError`s) and the calls that follow a running job:
waiting for its conditions, its pods and its logs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from bus.base import BusError
from schemas.kubeflow import JOB_CLASSES
from schemas.status import JobPhase
from trainhub.producer import POD_ANSWER_TIMEOUT
from trainhub.sdk import TrainHubClient
from trainhub.sdk_errors import JobFailedError, JobNotFoundError, JobTimeoutError, TrainHubError
from trainhub.sdk_pods import JobPod
from trainhub.sdk_view import TrainHubJob
from trainhub.training_jobs import (
    CONTAINERS,
    DEFAULT_TIMEOUT,
    JOB_CONDITIONS,
    WAITABLE,
    check_kind,
    has_condition,
    job_events,
    job_object,
    pod_objects,
)
from trainhub.training_models import V1Pod

log = logging.getLogger("trainhub.training_client")

_T = TypeVar("_T")
_FOLLOW = 7 * 24 * 3600.0
"""How long `get_job_logs(follow=True)` follows at most (upstream's: until the pods end)."""
_REPLICA_TYPES = frozenset(t.lower() for c in JOB_CLASSES.values() for t in c.REPLICA_TYPES)


async def _within(coro: Coroutine[Any, Any, _T], timeout: float) -> _T:
    async with asyncio.timeout(timeout):
        return await coro


def seconds(value: object, what: str, *, positive: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not value >= 0
        or (positive and value == 0)
    ):
        more = "more than 0" if positive else "0 or more"
        raise ValueError(f"{what}: seconds, {more} (got {value!r})")
    return float(value)


class TrainingFollowing:
    """`TrainingClient`'s plumbing and following calls, over `hub`."""

    hub: TrainHubClient
    namespace: str
    job_kind: str

    def _run(
        self,
        call: Callable[[], Coroutine[Any, Any, _T]],
        timeout: float,
        subject: str,
        *,
        refusals: bool = False,
    ) -> _T:
        """The call, bounded by `timeout` seconds: else "Timeout to <subject>"; a failure is
        "Failed to <subject>: <why>" (with `refusals`, a document the hub would refuse too, as
        the apiserver's refusal is)."""
        limit = seconds(timeout, "timeout", positive=True)
        caught: tuple[type[Exception], ...] = (TrainHubError, BusError)
        if refusals:
            caught = (*caught, ValueError)
        try:
            return self.hub.run_on_loop(_within(call(), limit))
        except TimeoutError as exc:
            raise TimeoutError(f"Timeout to {subject}") from exc
        except caught as exc:
            raise RuntimeError(f"Failed to {subject}: {exc}") from exc

    def _find(
        self, name: str, namespace: str, job_kind: str, timeout: float, action: str = "get"
    ) -> TrainHubJob:
        """The job of that name and kind, not deleted; else upstream's RuntimeError."""
        subject = f"{action} {job_kind}: {namespace}/{name}"
        job = self._run(lambda: self.hub.aio.get_job(name, namespace), timeout, subject)
        if job.phase == JobPhase.DELETED:
            raise RuntimeError(f"Failed to {subject}: it was deleted")
        if job.kind is not None and job.kind != job_kind:
            raise RuntimeError(
                f"Failed to {subject}: the job of that name is a {job.kind} "
                f"(pass job_kind={job.kind!r})"
            )
        return job

    # -- waiting --------------------------------------------------------------------------

    def wait_for_job_conditions(
        self,
        name: str,
        namespace: str | None = None,
        job_kind: str | None = None,
        expected_conditions: Iterable[str] = frozenset({"Succeeded"}),
        wait_timeout: int = 600,
        polling_interval: int = 15,
        callback: Callable[[Any], Any] | None = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> Any:
        """Wait until the job has one of `expected_conditions` and return it. A `Failed` job
        that was not expected is a `RuntimeError`, as is one deleted meanwhile; `wait_timeout`
        seconds passed, a `TimeoutError`. `callback` gets the job object at every change (and
        every `polling_interval` seconds at most). `Suspended` may be waited for too."""
        namespace = namespace or self.namespace
        kind = check_kind(job_kind or self.job_kind)
        expected = (
            {expected_conditions}
            if isinstance(expected_conditions, str)
            else set(expected_conditions or ())
        )
        if not expected or not expected <= WAITABLE:
            raise ValueError(
                f"Expected conditions: {sorted(expected)} must be subset of "
                f"{sorted(JOB_CONDITIONS)}"
            )
        limit = seconds(wait_timeout, "wait_timeout")
        interval = seconds(polling_interval, "polling_interval", positive=True)
        first = self._find(name, namespace, kind, seconds(timeout, "timeout", positive=True))
        key = f"{namespace}/{name}"

        def seen(job: TrainHubJob) -> None:
            current = job_object(job, kind)
            conditions = current.status.conditions or []
            if conditions:
                last = conditions[-1]
                log.debug("%-30.30s %-20.20s %s", name, last.type, last.last_transition_time)
            if callback is not None:
                callback(current)
            if "Failed" not in expected and has_condition(conditions, "Failed"):
                raise RuntimeError(f"{kind} {key} is Failed. {kind} conditions: {conditions}")

        try:
            final = self.hub.wait_for_job_conditions(
                first.uid, None, expected, limit, interval, seen
            )
        except JobTimeoutError as exc:
            raise TimeoutError(
                f"Timeout waiting for {kind}: {key} to reach expected conditions: "
                f"{sorted(expected)}"
            ) from exc
        except JobFailedError as exc:
            phase = exc.job.phase.value if exc.job.phase else "gone"
            conditions = job_object(exc.job, kind).status.conditions
            raise RuntimeError(f"{kind} {key} is {phase}. {kind} conditions: {conditions}") from exc
        except (TrainHubError, BusError) as exc:
            raise RuntimeError(f"Failed to get {kind}: {key}: {exc}") from exc
        return job_object(final, kind)

    # -- pods -----------------------------------------------------------------------------

    def get_job_pods(
        self,
        name: str,
        namespace: str | None = None,
        is_master: bool = False,
        replica_type: str | None = None,
        replica_index: int | None = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> list[V1Pod]:
        """The job's pods (`V1Pod`s with metadata; none while it is not placed, as upstream
        lists none before they exist), `is_master`, `replica_type` (any case) and
        `replica_index` filtering them. Named as the worker running the job names them, with
        `status.phase` (and `start_time`, `reason`, `message`) as that worker tells it; its
        silence for a few seconds (it is down) leaves `status` None."""
        return self._pods(name, namespace, is_master, replica_type, replica_index, timeout)

    def get_job_pod_names(
        self,
        name: str,
        namespace: str | None = None,
        is_master: bool = False,
        replica_type: str | None = None,
        replica_index: int | None = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> list[str]:
        pods = self._pods(
            name, namespace, is_master, replica_type, replica_index, timeout, phases=False
        )
        return [pod.metadata.name for pod in pods]

    def _pods(
        self,
        name: str,
        namespace: str | None,
        is_master: bool,
        replica_type: str | None,
        replica_index: int | None,
        timeout: int,
        *,
        phases: bool = True,
    ) -> list[V1Pod]:
        """`get_job_pods`; without `phases`, no worker is asked (names need none)."""
        namespace = namespace or self.namespace
        if replica_type is not None and (
            not isinstance(replica_type, str) or replica_type.lower() not in _REPLICA_TYPES
        ):
            raise ValueError(
                f"replica_type must be one of {sorted(_REPLICA_TYPES)} (got {replica_type!r})"
            )
        if replica_index is not None and (
            isinstance(replica_index, bool) or not isinstance(replica_index, int)
        ):
            raise ValueError(f"replica_index: a replica's index (got {replica_index!r})")
        aio = self.hub.aio

        async def pods() -> tuple[TrainHubJob | None, list[JobPod]]:
            try:
                job = await aio.get_job(name, namespace)
            except JobNotFoundError:
                return None, []  # as a label selector that matches nothing
            if job.cluster is None or job.phase == JobPhase.DELETED:
                return job, []
            found = await aio.get_job_pods(
                job.uid,
                is_master=is_master,
                replica_type=replica_type,
                replica_index=replica_index,
                phase_timeout=POD_ANSWER_TIMEOUT if phases else None,
            )
            return job, found

        subject = f"list pods for Job: {namespace}/{name}"
        job, found = self._run(pods, timeout, subject)
        return pod_objects(job, found)

    # -- logs -----------------------------------------------------------------------------

    def get_job_logs(
        self,
        name: str,
        namespace: str | None = None,
        job_kind: str | None = None,
        is_master: bool = True,
        replica_type: str | None = None,
        replica_index: int | None = None,
        follow: bool = False,
        timeout: int = DEFAULT_TIMEOUT,
        verbose: bool = False,
        *,
        container: str | None = None,
    ) -> tuple[dict[str, str], dict[str, list[str]]]:
        """`(logs, events)`: pod name -> its log (the master pod's by default; every pod
        with `is_master=False`), and with `verbose` the job's status history as
        `{"<kind>/<name>": ["<time> <what happened>"]}`. With `follow`, each line is printed
        as `[Pod <name>]: <line>` as it comes, until the job ends. `container` may only be the
        kind's (its main container: the one whose log the worker sends)."""
        namespace = namespace or self.namespace
        kind = check_kind(job_kind or self.job_kind)
        if container is not None and container != CONTAINERS[kind]:
            raise ValueError(
                f"container: trainhub's workers send the log of {kind}'s main container "
                f"{CONTAINERS[kind]!r} (got {container!r})"
            )
        names = self.get_job_pod_names(
            name, namespace, is_master, replica_type, replica_index, timeout
        )
        key = f"{namespace}/{name}"
        logs: dict[str, str] = {}
        if names and follow:
            try:
                for chunk in self.hub.stream_job_logs(key, follow=True, timeout=_FOLLOW):
                    pod = chunk.pod or ""
                    if pod in names:
                        for line in chunk.text.splitlines():
                            print(f"[Pod {pod}]: {line}")
                        logs[pod] = logs.get(pod, "") + chunk.text
            except (TrainHubError, BusError) as exc:
                raise RuntimeError(f"Failed to read logs for Job {key}: {exc}") from exc
        elif names:
            every = self._run(
                lambda: self.hub.aio.get_job_logs(key), timeout, f"read logs for Job {key}"
            )
            logs = {pod: every[pod] for pod in names if pod in every}
        events: dict[str, list[str]] = {}
        if verbose:
            events = job_events(self._find(name, namespace, kind, timeout), kind)
        return logs, events
