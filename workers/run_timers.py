"""The clocks of a worker's jobs: activeDeadlineSeconds while a job is active and
ttlSecondsAfterFinished once it finished, one timer per job; the unschedulable timeout
after which a job whose pods find no node is handed back to be placed elsewhere; and the
retention after which a finished run leaves the worker's hands."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from bus.aiotasks import TaskOwner
from bus.retry import retry_transient
from workers.backends.base import BACKEND_RETRY, Backend, BackendError, is_transient
from workers.job_locks import JobLocks
from workers.job_run import Clock, Decision, JobRun
from workers.worker_config import WorkerConfig

log = logging.getLogger(__name__)


@dataclass
class _Timer:
    due: datetime
    task: asyncio.Task[None]


@dataclass
class _Retiring:
    due: float
    """Monotonic time the run may leave."""
    run: JobRun


class RunTimers:
    """`arm` sets a run's next timer (after each of its decisions); when one is due, the run's
    deadline decision is carried out, or its objects deleted once its TTL ran out.
    `run_unschedulable` hands back, every few seconds, the jobs unschedulable for too long.
    `run_retirements` lets finished runs go `run_retention` after they finished: the run
    leaves (`retire`), and a TTL still to run keeps only a timer with the job's uid and
    namespace, so what a worker holds follows its live jobs, not every job it ever ran."""

    def __init__(
        self,
        backend: Backend,
        runs: dict[str, JobRun],
        *,
        locks: JobLocks,
        tasks: TaskOwner,
        config: WorkerConfig,
        decide: Callable[[JobRun, Decision], Awaitable[None]],
        forget: Callable[[JobRun], None],
        retire: Callable[[JobRun], bool],
        hand_back: Callable[[JobRun, str], Awaitable[None]],
    ) -> None:
        """`retire` lets a finished run go (False: it still has work in hand, try later)."""
        self._backend = backend
        self._runs = runs
        self._locks = locks
        self._tasks = tasks
        self._config = config
        self._decide = decide
        self._forget = forget
        self._retire = retire
        self._hand_back = hand_back
        self.armed: dict[str, _Timer] = {}
        """Each job's pending timer."""
        self.retiring: dict[str, _Retiring] = {}
        """Finished runs in hand, in the order they finished (so by due time: the retention
        is the same for all)."""

    def _extra(self, uid: str | None = None) -> dict[str, str | None]:
        return {"cluster": self._config.cluster, "job": uid}

    def arm(self, run: JobRun) -> None:
        uid = run.job.uid
        if run.finished:
            self._retire_later(run)
        due = run.next_timer()
        current = self.armed.get(uid)
        if current is not None and current.due == due and not current.task.done():
            return
        self.cancel(uid)
        if due is not None:
            task = self._tasks.spawn(self._fire_at(run, due), f"timer-{uid}")
            self.armed[uid] = _Timer(due, task)

    def cancel(self, uid: str) -> None:
        timer = self.armed.pop(uid, None)
        if timer is not None and timer.task is not asyncio.current_task():
            timer.task.cancel()

    def clear(self) -> None:
        """Forget every timer (their tasks are cancelled with the worker's)."""
        self.armed.clear()
        self.retiring.clear()

    def retire_later(self, run: JobRun) -> None:
        """Let the finished run go after `run_retention` (for runs whose timers are not armed
        here: a delegated job's clocks are its operator's)."""
        self._retire_later(run)

    def _retire_later(self, run: JobRun) -> None:
        uid = run.job.uid
        current = self.retiring.get(uid)
        if current is not None and current.run is run:
            return
        self.retiring.pop(uid, None)  # a run before it: this one goes to the end
        self.retiring[uid] = _Retiring(time.monotonic() + self._config.run_retention, run)

    async def run_retirements(self) -> None:
        period = max(0.05, min(5.0, self._config.run_retention / 4))
        while True:
            await asyncio.sleep(period)
            await self.retire_due()

    async def retire_due(self) -> None:
        """Let go the finished runs whose retention ran out (oldest first, so this stops at
        the first one still within it)."""
        now = time.monotonic()
        while self.retiring:
            uid, entry = next(iter(self.retiring.items()))
            if entry.due > now:
                return
            del self.retiring[uid]
            async with self._locks.job(uid):
                run = entry.run
                if self._runs.get(uid) is not run or not run.finished:
                    continue
                timer = self.armed.get(uid)
                if not self._retire(run):
                    self._retire_later(run)  # work still in hand: a retention later
                    continue
                if timer is not None:
                    # Its TTL runs on without the run: the uid and namespace are enough.
                    timer.task.cancel()
                    namespace = run.job.metadata.namespace
                    task = self._tasks.spawn(
                        self._expire_later(uid, namespace, timer.due, run.clock), f"ttl-{uid}"
                    )
                    self.armed[uid] = _Timer(timer.due, task)

    async def _fire_at(self, run: JobRun, due: datetime) -> None:
        await self._when_due(due, run.clock, run.job.uid, lambda: self._fire(run))

    async def _when_due(
        self, due: datetime, clock: Clock, uid: str, action: Callable[[], Awaitable[None]]
    ) -> None:
        """Wait until `due` by `clock`, then carry `action` out, tried again while the
        backend's refusals are transient."""
        delay = (due - clock()).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)

        def retrying(error: BaseException, failures: int, wait: float) -> None:
            log.warning(
                "timer not carried out, trying again in %.1fs: %s",
                wait,
                error,
                extra=self._extra(uid),
            )

        await retry_transient(action, BACKEND_RETRY, transient=is_transient, on_retry=retrying)

    async def _fire(self, run: JobRun) -> None:
        uid = run.job.uid
        async with self._locks.job(uid):
            timer = self.armed.get(uid)
            if timer is not None and timer.task is asyncio.current_task():
                del self.armed[uid]
            if self._runs.get(uid) is not run:
                return
            if run.finished:
                await self._expire(run)
            else:
                await self._decide(run, run.expire_deadline())

    async def _expire(self, run: JobRun) -> None:
        """ttlSecondsAfterFinished ran out: delete the job's objects and forget the run (the
        hub keeps its final status)."""
        uid = run.job.uid
        expiry = run.expiry()
        if expiry is None or run.clock() < expiry:
            self.arm(run)
            return
        await self._backend.delete_job(uid, run.job.metadata.namespace)
        self._forget(run)
        log.info("deleted after ttlSecondsAfterFinished", extra=self._extra(uid))

    async def _expire_later(self, uid: str, namespace: str, due: datetime, clock: Clock) -> None:
        """ttlSecondsAfterFinished of a job whose run already left: delete its objects."""
        await self._when_due(due, clock, uid, lambda: self._expire_left(uid, namespace))

    async def _expire_left(self, uid: str, namespace: str) -> None:
        async with self._locks.job(uid):
            timer = self.armed.get(uid)
            if timer is None or timer.task is not asyncio.current_task():
                return  # cancelled: revoked, or a new run took the job meanwhile
            if uid in self._runs:
                del self.armed[uid]
                return  # a new run arrived and its first decision is still to come
            await self._backend.delete_job(uid, namespace)
            del self.armed[uid]
            log.info("deleted after ttlSecondsAfterFinished", extra=self._extra(uid))

    async def run_unschedulable(self) -> None:
        period = max(0.1, min(5.0, self._config.unschedulable_timeout / 4))
        while True:
            await asyncio.sleep(period)
            await self._hand_back_unschedulable()

    async def _hand_back_unschedulable(self) -> None:
        now = datetime.now(UTC).timestamp()
        for run in list(self._runs.values()):
            since = run.unschedulable_since
            if run.finished or since is None or now - since < self._config.unschedulable_timeout:
                continue
            reason = f"pods unschedulable for {now - since:.0f}s: {run.pending_reason or ''}"
            try:
                await self._hand_back(run, reason)
            except BackendError as error:
                if not error.transient:
                    raise
                log.warning(
                    "cannot hand back yet (next round tries again): %s",
                    error,
                    extra=self._extra(run.job.uid),
                )
