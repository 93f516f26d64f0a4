"""Carrying out what a `JobRun` decides: the cluster's objects made and deleted (the job's
own object, ConfigMaps, access objects, the PodGroup, pods with their Services), the status
told (and written into the job's own object), the run's next timer set.

The steps of a decision are taken off it as they are done, and a job's decisions wait in a
queue: work that a transient refusal interrupted goes on where it stopped, before that job's
next decision, or from the catch-up loop when nothing else comes first."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from bus.retry import retry_transient
from workers.backends.base import (
    BACKEND_RETRY,
    Backend,
    BackendError,
    deleted_before_it_ended,
    is_transient,
)
from workers.job_locks import JobLocks
from workers.job_run import Decision, JobRun
from workers.job_statuses import JobStatuses
from workers.metrics import WorkerMetrics
from workers.rendering import PodPlan

log = logging.getLogger(__name__)

UNSCHEDULABLE_REASON = "Unschedulable"
CREATE_CONCURRENCY = 32
"""Pods (each with its Service) being created at once, over every job of the cluster."""


class WorkStillQueued(BackendError):
    """A catch-up pass left work queued (a job interrupted again meanwhile)."""

    transient = True


class DecisionExecutor:
    """`prepare` a new run, then `decide` each of its decisions (its lock held); `run_catch_up`
    retries, with backoff, what transient refusals left behind; `drop` forgets a job's."""

    def __init__(
        self,
        backend: Backend,
        runs: dict[str, JobRun],
        statuses: JobStatuses,
        metrics: WorkerMetrics,
        *,
        cluster: str,
        locks: JobLocks,
        arm: Callable[[JobRun], None],
        report_soon: Callable[[], None],
    ) -> None:
        self._backend = backend
        self._runs = runs
        self._statuses = statuses
        self._metrics = metrics
        self._cluster = cluster
        self._locks = locks
        self._arm = arm
        self._report_soon = report_soon
        self._creates = asyncio.Semaphore(CREATE_CONCURRENCY)
        self._queued: dict[str, list[Decision]] = {}
        """Decisions a transient refusal interrupted, per job: carried out (what is left of
        them) before that job's next one."""
        self._unprepared: set[str] = set()
        """Jobs whose ConfigMaps and access objects are not all made yet."""
        self._grouped: set[str] = set()
        """Jobs whose PodGroup this executor made (or found up to date) since it last
        deleted it: their pods are created without asking again."""
        self._owned: set[str] = set()
        """Jobs whose own object the backend made or found (by this executor): what is made
        for them afterwards is owned by it. An adopted run's is found at its first decision."""
        self._interrupted = asyncio.Event()
        """Set when a transient refusal leaves work in `_queued` or `_unprepared`."""

    def _extra(self, uid: str | None = None) -> dict[str, str | None]:
        return {"cluster": self._cluster, "job": uid}

    def prepare(self, run: JobRun) -> None:
        """A new run's ConfigMaps and access objects are made before its first decision."""
        self._unprepared.add(run.job.uid)

    def drop(self, uid: str) -> None:
        """Forget what is left of the job's work (its run is gone)."""
        self._queued.pop(uid, None)
        self._unprepared.discard(uid)
        self._grouped.discard(uid)
        self._owned.discard(uid)

    def holds_work(self, uid: str) -> bool:
        """Work of the job that a transient refusal interrupted is still to be done."""
        return uid in self._queued or uid in self._unprepared

    async def decide(self, run: JobRun, decision: Decision) -> None:
        """Carry a decision out, after whatever of the run's earlier ones a transient refusal
        interrupted."""
        self._queued.setdefault(run.job.uid, []).append(decision)
        await self.catch_up(run)

    async def catch_up(self, run: JobRun) -> None:
        """Make the run's missing ConfigMaps and access objects, then carry out its queued
        decisions in order (its lock is held). A cluster that refuses for good fails the job; a
        transient refusal leaves the rest queued, for the event's retry, the run's next
        decision or the catch-up loop, and is raised."""
        uid = run.job.uid
        try:
            if uid not in self._owned:
                await self._backend.ensure_job_object(run.job, run.attempt)
                self._owned.add(uid)
            if uid in self._unprepared:
                for config_map in run.rendered.config_maps:
                    await self._backend.create_config_map(uid, config_map)
                for service in run.rendered.job_services:
                    await self._backend.create_service(uid, service)
                for secret in run.rendered.secrets:
                    await self._backend.create_secret(uid, secret)
                for access in run.rendered.access:
                    await self._backend.create_access(uid, access)
                self._unprepared.discard(uid)
            queue = self._queued.get(uid, [])
            while queue:
                await self._carry_out(run, queue[0])
                queue.pop(0)
            self._queued.pop(uid, None)
        except BackendError as error:
            if not error.transient:
                await self._refused(run, error)
                return
            self._interrupted.set()
            raise

    async def run_catch_up(self) -> None:
        """Retry, with backoff, the work transient refusals left behind (when nothing else
        has retried it first)."""
        while True:
            await self._interrupted.wait()
            if self._queued or self._unprepared:
                await retry_transient(
                    self._catch_up_all,
                    BACKEND_RETRY,
                    transient=is_transient,  # catch_up fails jobs refused for good
                    on_retry=self._still_refused,
                    failed_with=WorkStillQueued("interrupted by a transient refusal"),
                )
            self._interrupted.clear()

    async def _catch_up_all(self) -> None:
        """One pass over the work transient refusals left behind, job by job."""
        for uid in sorted(self._queued.keys() | self._unprepared):
            async with self._locks.job(uid):
                run = self._runs.get(uid)
                if run is None:
                    self.drop(uid)
                else:
                    await self.catch_up(run)
        if self._queued or self._unprepared:
            raise WorkStillQueued("interrupted again meanwhile")

    def _still_refused(self, error: BaseException, failures: int, wait: float) -> None:
        if not isinstance(error, WorkStillQueued):
            log.warning("interrupted work still refused: %s", error, extra=self._extra())

    async def object_deleted(self, run: JobRun, what: str) -> None:
        """Someone else deleted the job's own object before the run ended (`what` names it):
        as when the cluster refuses the job's objects, what is left of the job is deleted
        (a garbage collector would take it too) and the job fails."""
        await self._refused(run, BackendError(deleted_before_it_ended(what, self._cluster)))

    async def _refused(self, run: JobRun, error: BackendError) -> None:
        """The cluster refused the job's objects for good: remove what exists, fail the job."""
        uid = run.job.uid
        self.drop(uid)
        log.error("the cluster refused the job: %s", error, extra=self._extra(uid))
        try:
            await self._backend.delete_job(uid, run.job.metadata.namespace)
        except BackendError as cleanup:
            log.error("cannot delete the job's objects: %s", cleanup, extra=self._extra(uid))
        message = f"{run.kind} {run.name} cannot run on {self._cluster}: {error}"
        await self._after(run, run.fail(message))

    async def _carry_out(self, run: JobRun, decision: Decision) -> None:
        """The steps of a decision, each taken off it once done: one that a transient refusal
        interrupted goes on where it stopped."""
        uid = run.job.uid
        group = run.rendered.pod_group
        if group is not None and (decision.restart or decision.create) and uid not in self._grouped:
            # Before any pod, as upstream: a pod of a group that does not exist yet waits.
            await self._backend.create_pod_group(uid, group)
            self._grouped.add(uid)
        restarts = self._metrics.pod_restarts.labels(self._cluster)
        while decision.restart:
            pod = decision.restart[0]
            await self._backend.delete_pod(uid, pod.name, pod.namespace)
            await self._create_pod(run, pod)
            decision.restart.pop(0)
            restarts.inc()
        if decision.restarted_in_place:
            restarts.inc(decision.restarted_in_place)
            decision.restarted_in_place = 0
        while decision.delete:
            pod = decision.delete[0]
            await self._backend.delete_pod(uid, pod.name, pod.namespace)
            decision.delete.pop(0)
        if group is not None and (decision.finished or (decision.changed and run.suspended)):
            # Upstream deletes the group when the job finishes or is suspended, whatever
            # cleanPodPolicy leaves running; a resumed job gets it again before its pods.
            await self._backend.delete_pod_group(uid, group)
            self._grouped.discard(uid)
        await self._create_pods(run, decision.create)
        while decision.config_maps:
            await self._backend.update_config_map(uid, decision.config_maps[0])
            decision.config_maps.pop(0)
        await self._after(run, decision)

    async def _create_pods(self, run: JobRun, pods: list[PodPlan]) -> None:
        """Create a job's pods concurrently (see `_create_pod`), taking each one made off
        `pods`; the first failure is raised once every create has settled."""
        results = await asyncio.gather(
            *(self._create_pod(run, p) for p in pods), return_exceptions=True
        )
        pods[:] = [pod for pod, result in zip(pods, results, strict=True) if result is not None]
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _create_pod(self, run: JobRun, pod: PodPlan) -> None:
        """The pod and its Service (deleting a pod takes its Service along), a bounded number
        at a time over every job (an apiserver round trip each)."""
        service = next((s for s in run.rendered.services if s.name == pod.name), None)
        async with self._creates:
            if service is not None:
                await self._backend.create_service(run.job.uid, service)
            await self._backend.create_pod(run.job.uid, pod)
        self._metrics.pods_created.labels(self._cluster).inc()

    async def _after(self, run: JobRun, decision: Decision) -> None:
        """Tell the hub what changed, write it into the job's own object, and set the run's
        next timer."""
        if decision.changed:
            await self._statuses.publish(run)
        # Replica counts change without a condition: the backend sends only what differs.
        await self._backend.write_job_status(run.job, run.status)
        if decision.unschedulable and run.pending_reason:
            await self._statuses.publish(run, UNSCHEDULABLE_REASON, run.pending_reason)
        self._arm(run)
        if decision.finished:
            # Freed capacity should reach the hub now, not at the next periodic heartbeat.
            self._report_soon()
