"""A worker in delegate mode: each job is handed whole to the member cluster's own operator
(the Training Operator) through the job's object there, and what that operator writes into
the object's status is told on the bus as the job's status, as direct mode tells its own.

Suspend and resume travel through the object (`runPolicy.suspend`), deletion by deleting it
(the backend's `delete_job`, which the worker calls as in direct mode). Deadlines, TTLs,
restarts and backoff limits are the operator's, read back from the conditions it sets. The
job's pods (the operator's) are followed only for the scheduler's word: pods that find no
node for the unschedulable timeout hand the job back to the hub, as in direct mode."""

from __future__ import annotations

import logging
from collections.abc import Callable

from schemas.status import JobPhase
from workers.backends.base import BackendError, PodObservation, deleted_before_it_ended
from workers.backends.delegating import DelegatedStatus, DelegatingBackend
from workers.decision_executor import UNSCHEDULABLE_REASON
from workers.delegated_status import deciding_condition, parse_status, phase_of, same_status
from workers.job_locks import JobLocks
from workers.job_run import JobRun
from workers.job_statuses import JobStatuses

log = logging.getLogger(__name__)


class Delegation:
    """`start`, `suspend` and `resume` a run through its object (its job's lock held);
    `run` mirrors the objects' statuses onto the runs as they change."""

    def __init__(
        self,
        backend: DelegatingBackend,
        runs: dict[str, JobRun],
        statuses: JobStatuses,
        *,
        cluster: str,
        locks: JobLocks,
        finished: Callable[[JobRun], None],
    ) -> None:
        """`finished`: called once a run ended (its retention starts, its capacity is
        reported free)."""
        self._backend = backend
        self._runs = runs
        self._statuses = statuses
        self._cluster = cluster
        self._locks = locks
        self._finished = finished

    def _extra(self, uid: str | None = None) -> dict[str, str | None]:
        return {"cluster": self._cluster, "job": uid}

    async def start(self, run: JobRun) -> None:
        """Create the job's object (again, when an assignment is redelivered: idempotent). A
        kind the operator does not run, or an object the cluster refuses for good, fails the
        job; a transient refusal is raised for the assignment's retry."""
        job = run.job
        why_not = self._backend.delegates(job)
        try:
            if why_not is not None:
                raise BackendError(why_not)
            await self._backend.create_job_object(job, run.attempt)
        except BackendError as error:
            if error.transient:
                raise
            await self._refused(run, error)
            return
        log.info("handed to the cluster's operator", extra=self._extra(job.uid))

    async def _refused(self, run: JobRun, error: BackendError) -> None:
        log.error("the cluster refused the job: %s", error, extra=self._extra(run.job.uid))
        message = f"{run.kind} {run.name} cannot run on {self._cluster}: {error}"
        decision = run.fail(message)
        if decision.changed:
            await self._statuses.publish(run)
            self._finished(run)

    async def object_deleted(self, run: JobRun) -> None:
        """The job's object went before the run ended (deleted behind trainhub's back): the
        job fails."""
        what = f"{run.kind} {run.name}"
        await self._refused(run, BackendError(deleted_before_it_ended(what, self._cluster)))

    async def suspend(self, run: JobRun) -> None:
        if run.finished:
            return
        await self._backend.suspend_job_object(run.job, True)
        log.info("asked the operator to suspend the job", extra=self._extra(run.job.uid))

    async def resume(self, run: JobRun) -> None:
        if run.finished:
            return
        await self._backend.suspend_job_object(run.job, False)
        log.info("asked the operator to resume the job", extra=self._extra(run.job.uid))

    async def observe(self, run: JobRun, obs: PodObservation) -> None:
        """One of the job's pods (made by the operator from the templates trainhub labelled)
        as the scheduler sees it: a new reason it cannot be placed is told, as direct mode
        tells it, and the run's `unschedulable_since` lets the unschedulable timeout hand
        the job back to the hub (its lock is held)."""
        if run.follow_scheduling(obs) and run.pending_reason:
            await self._statuses.publish(run, UNSCHEDULABLE_REASON, run.pending_reason)

    async def run(self) -> None:
        """Mirror every status the backend reports, each under its job's lock."""
        while True:
            reported = await self._backend.job_statuses.get()
            async with self._locks.job(reported.job_uid):
                await self.mirror(reported)

    async def mirror(self, reported: DelegatedStatus) -> None:
        """Take the object's status as the run's, and publish it when it tells something new.
        An object of another attempt, or of a job not in hand, is not this run's story; a
        run whose object went away before it ended (deleted behind trainhub's back) fails."""
        run = self._runs.get(reported.job_uid)
        if run is None or run.finished:
            return
        if reported.attempt is not None and reported.attempt != run.attempt:
            return
        if reported.status is None:
            await self.object_deleted(run)
            return
        status = parse_status(reported.status)
        if status is None:
            return  # nothing written yet: the run's own Created stands
        phase = phase_of(status)
        if phase == run.phase and same_status(run.status, status):
            return
        if phase == run.phase == JobPhase.CREATED:
            # Told already, when the job was handed over: the operator's Created (its own
            # times, its first replica counts) is the same news.
            run.status = status
            return
        run.status, run.phase = status, phase
        run.suspended = phase == JobPhase.SUSPENDED
        condition = deciding_condition(status)
        if condition is None:
            await self._statuses.publish(run)
        else:
            await self._statuses.publish(run, condition.reason, condition.message)
        if run.finished:
            self._finished(run)
