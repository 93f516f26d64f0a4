"""The Python SDK, modelled on Kubeflow's `TrainingClient` but over the bus: jobs are created
on the jobs topic, their state comes from the status topic and their logs from the worker of
whichever cluster runs them. `AsyncTrainHubClient` (trainhub.sdk_client) is the asyncio
flavour; `TrainHubClient`, here, runs it on an event loop thread of its own, so it works from
any code, notebooks included."""

from __future__ import annotations

import contextlib
import functools
import queue
import weakref
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from schemas.status import ConditionType
from trainhub.sdk_client import AsyncTrainHubClient
from trainhub.sdk_documents import JobSource
from trainhub.sdk_errors import looked_for
from trainhub.sdk_loop import LoopThread
from trainhub.sdk_view import TrainHubJob
from trainhub.settings import TrainhubSettings

__all__ = ["AsyncTrainHubClient", "JobSource", "TrainHubClient", "looked_for"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _shut_down(loop: LoopThread, client: AsyncTrainHubClient) -> None:
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
        self._loop = LoopThread()
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

    def run_on_loop(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run a coroutine on the client's event loop thread and return its result: for code
        that must share the loop of `aio` (`TrainingClient`, an embedded runner on its bus)."""
        return self._loop.run(coro)

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
