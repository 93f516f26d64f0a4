"""A worker: runs the jobs the hub assigns to its cluster and reports their status.

Every change to a run (an assignment, a suspension, a pod observation, a timer) happens under
its job's lock, so the backend calls that carry out one decision never interleave with another
of the same job's, while different jobs go on at once; a sweep holds every job's lock.
A transient refusal of the cluster (its apiserver unreachable) never ends the worker: the work
it interrupted is tried again with backoff, and heartbeats pause until capacity can be read.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from bus.aiotasks import TaskOwner
from bus.base import Bus, Record
from bus.events import EventConsumer, events_to_end, publish_payload
from bus.retry import RetryPolicy, retry_transient
from bus.topics import Topics
from schemas.cluster import ClusterSnapshot
from schemas.events import (
    CloudEvent,
    EventType,
    JobAssigned,
    JobHandedBack,
    JobRef,
    JobRevoked,
    JobStatusUpdate,
    LogsRequested,
)
from schemas.job_parsing import parse_job
from workers.backends.base import Backend, BackendError, PodObservation
from workers.capacity_reports import CapacityReports
from workers.job_locks import JobLocks
from workers.job_run import Decision, JobRun
from workers.log_requests import LogRequests
from workers.metrics import worker_metrics
from workers.observation_lanes import ObservationLanes
from workers.rendering import PodPlan, render_job
from workers.worker_config import WorkerConfig

__all__ = ["UNSCHEDULABLE_REASON", "Worker", "WorkerConfig"]

log = logging.getLogger(__name__)

UNSCHEDULABLE_REASON = "Unschedulable"
_STOP_GRACE = 30.0
"""How long a stopping worker lets the assignments it is handling finish."""
_TOPICS_WAIT = 120.0
"""How long a starting worker waits for shared topics it may not create (the hub's)."""
_JOB_CONCURRENCY = 8
"""Jobs whose assignments are carried out at once (each job's events stay in order)."""
CREATE_CONCURRENCY = 32
"""Pods (each with its Service) being created at once, over every job of the cluster."""
WORK_RETRY = RetryPolicy(initial_wait=0.2, max_wait=5.0)
"""Work that a transient refusal interrupted is tried again until it passes."""
ADOPTION_RETRY = RetryPolicy(initial_wait=0.2, max_wait=5.0, attempts=5)
"""The adoption pass gives up starting after these tries (its Deployment restarts the
worker): running without that pass could leak the pods of jobs revoked while it was away."""


def is_transient(error: BaseException) -> bool:
    return isinstance(error, BackendError) and error.transient


class WorkStillQueued(BackendError):
    """A catch-up pass left work queued (a job interrupted again meanwhile)."""

    transient = True


@dataclass
class _Timer:
    due: datetime
    task: asyncio.Task[None]


@dataclass
class _Placements:
    """What a cluster's assignments topic says, read from its start to its end."""

    wanted: dict[str, JobAssigned] = field(default_factory=dict)
    """The newest assignment of each job still placed here."""
    revoked: dict[str, int] = field(default_factory=dict)
    """Jobs whose newest event here is a revocation, with the attempt it ends."""


class Worker:
    def __init__(
        self,
        bus: Bus,
        backend: Backend,
        config: WorkerConfig,
        topics: Topics | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.bus = bus
        self.backend = backend
        self.config = config
        self.topics = topics or Topics()
        self.metrics = worker_metrics(registry or CollectorRegistry())
        self.metrics.register_cluster(config.cluster)
        self.runs: dict[str, JobRun] = {}
        self.log_requests = LogRequests(
            bus, self.topics, backend, self.runs, cluster=config.cluster, source=config.source
        )
        self._tasks = TaskOwner(f"worker-{config.cluster}")
        self._consumer: EventConsumer | None = None
        self._locks = JobLocks()
        self._reports = CapacityReports(
            bus,
            self.topics,
            backend,
            config,
            self.metrics,
            locks=self._locks,
            sweep=self._sweep,
        )
        self._creates = asyncio.Semaphore(CREATE_CONCURRENCY)
        self._observations = ObservationLanes(
            backend.observations,
            self._observe,
            locks=self._locks,
            tasks=self._tasks,
            cluster=config.cluster,
        )
        self._timers: dict[str, _Timer] = {}
        self._exported: set[tuple[str, str]] = set()
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self._consumed = asyncio.Event()
        """Clear while the assignments are consumed (set before start and after the stop)."""
        self._consumed.set()
        self._queued: dict[str, list[Decision]] = {}
        """Decisions a transient refusal interrupted, per job: carried out (what is left of
        them) before that job's next one."""
        self._unprepared: set[str] = set()
        """Jobs whose ConfigMaps and access objects are not all made yet."""
        self._outdated_below: dict[str, int] = {}
        """Per job, from the assignments topic as it stood when this worker started: the
        attempts below this one were revoked or replaced there, so their assignments, still
        to be read past the committed offset, must not start pods only to delete them."""
        self._interrupted = asyncio.Event()
        """Set when a transient refusal leaves work in `_queued` or `_unprepared`."""

    @property
    def cluster(self) -> str:
        return self.config.cluster

    async def start(self) -> None:
        await self.backend.start()
        # Under ACLs a worker may create only its assignments topic: one started before the
        # hub waits for the shared ones rather than failing its first heartbeat.
        await self.bus.create_topics(
            [*self.topics.shared_specs(), self.topics.assignment_spec(self.cluster)],
            wait=_TOPICS_WAIT,
        )
        self._consumer = EventConsumer(
            self.bus,
            [self.topics.assignments(self.cluster)],
            self._on_assignment_event,
            group=self.topics.worker_group(self.cluster),
            dead_letter_topic=self.topics.dead_letters,
            component=self.config.source,
            on_dead_letter=self._count_dead_letter,
            concurrency=_JOB_CONCURRENCY,
        )
        await self._adopt()
        await self._consumer.subscription.start()
        await self.heartbeat()
        self._tasks.spawn(self._consume(self._consumer), "assignments")
        lag = {self.topics.assignments(self.cluster): self._consumer.subscription}
        self._tasks.spawn(self.metrics.lag_sampler(lag).run(), "lag")
        self._tasks.spawn(self._observations.run(), "observe")
        self._tasks.spawn(self._reports.run(), "heartbeat")
        self._tasks.spawn(self._reports.run_asked(), "heartbeat-asked")
        self._tasks.spawn(self._unschedulable_loop(), "unschedulable")
        self._tasks.spawn(self._catch_up_loop(), "catch-up")
        log.info("worker started", extra={"cluster": self.cluster, "backend": self.backend.kind})

    async def _adopt(self) -> None:
        """After a restart: take back the jobs whose objects are still in the cluster, and
        delete the objects of jobs that were revoked or that this cluster never had.

        A transient refusal is tried again a few times, then start fails; a refusal for good
        (an identity that may not list cluster-wide) means running without adoption."""
        await retry_transient(
            self._adopt_once,
            ADOPTION_RETRY,
            transient=is_transient,
            on_retry=self._adoption_retry,
        )

    async def _adopt_once(self) -> None:
        placements = await self._replay_assignments()
        self._outdated_below = {
            **{uid: a.attempt for uid, a in placements.wanted.items()},
            **{uid: ended + 1 for uid, ended in placements.revoked.items()},
        }
        await self._reconcile(adopt=True, placements=placements)

    def _adoption_retry(self, error: BaseException, failures: int, wait: float) -> None:
        log.warning("cannot adopt yet, trying again: %s", error, extra=self._extra())

    async def _sweep(self) -> None:
        """Delete the objects of jobs the hub took away while this worker could not hear it,
        and drop their runs (every job's lock is held)."""
        log.info("sweeping the jobs no longer assigned here", extra=self._extra())
        await self._reconcile(adopt=False)

    async def _reconcile(self, *, adopt: bool, placements: _Placements | None = None) -> None:
        """Make the cluster agree with the assignments topic (its newest event per job): the
        objects of jobs not assigned here go, and so do the runs of jobs revoked here; with
        `adopt`, jobs still assigned here whose objects exist get a run back.

        Adopted runs create nothing: the backend's first listing reports their pods, and status
        continues from there. Every job's lock is held, or nothing else runs yet."""
        try:
            existing = await self.backend.job_uids()
        except BackendError as error:
            if error.transient:
                raise
            # E.g. an identity that may not list cluster-wide: only the runs in hand are known.
            log.warning("cannot look for the jobs in the cluster: %s", error, extra=self._extra())
            existing = set()
        if not existing and not self.runs:
            return
        if placements is None:
            placements = await self._replay_assignments()
        for uid in sorted(existing | set(self.runs)):
            run = self.runs.get(uid)
            assigned = placements.wanted.get(uid)
            if assigned is not None:
                if adopt and run is None:
                    self._take_back(assigned)
                continue
            ended = placements.revoked.get(uid)
            if run is not None and (ended is None or ended < run.attempt):
                continue  # its assignment left the topic's retention: not a revocation
            log.warning("deleting objects of a job not assigned here", extra=self._extra(uid))
            await self.backend.delete_job(uid, run.job.metadata.namespace if run else None)
            if run is not None:
                self._forget(run)
        self._export_jobs()

    def _take_back(self, assigned: JobAssigned) -> None:
        job = parse_job(assigned.job)
        rendered = render_job(
            job,
            self.backend.network(),
            attempt=assigned.attempt,
            wait_for_master=self.backend.init_containers,
        )
        self.runs[job.uid] = JobRun(
            rendered, self.cluster, assigned.attempt, conditions=assigned.conditions
        )
        log.info("adopted a running job", extra=self._extra(job.uid))

    async def _replay_assignments(self) -> _Placements:
        """The newest assignment or revocation of each job, from the whole topic."""
        placements = _Placements()
        wanted, revoked = placements.wanted, placements.revoked
        async for event in events_to_end(self.bus, self.topics.assignments(self.cluster)):
            try:
                if event.type == EventType.JOB_ASSIGNED:
                    assigned = event.data_as(JobAssigned)
                    wanted[assigned.uid] = assigned
                    revoked.pop(assigned.uid, None)
                elif event.type == EventType.JOB_REVOKED:
                    revocation = event.data_as(JobRevoked)
                    known = wanted.get(revocation.uid)
                    if known is None or known.attempt <= revocation.attempt:
                        wanted.pop(revocation.uid, None)
                        revoked[revocation.uid] = revocation.attempt
            except ValueError:
                continue  # the live consumer dead-letters it
        return placements

    @property
    def crashed(self) -> asyncio.Future[BaseException] | None:
        """Resolves with the exception of a background task that died."""
        return self._tasks.failed

    async def stop(self) -> None:
        """Stop consuming, let the assignments in hand finish and commit, then close."""
        self._stopping = True
        self._stop_requested.set()
        try:
            async with asyncio.timeout(_STOP_GRACE):
                await self._consumed.wait()
        except TimeoutError:
            log.warning("stopping with an assignment still in hand", extra=self._extra())
        await self._tasks.cancel_all()
        await self.log_requests.close()
        self._timers.clear()
        if self._consumer is not None:
            await self._consumer.subscription.stop()
        if not self.backend.keeps_pods:
            # Our pods die with this process: give their jobs back to be placed elsewhere.
            for run in list(self.runs.values()):
                if not run.finished:
                    await self.hand_back(run, f"worker of {self.cluster} stopped", stopping=True)
        await self._reports.report_stopped()
        await self.backend.close()
        log.info("worker stopped", extra=self._extra())

    async def _consume(self, consumer: EventConsumer) -> None:
        """Carry out assignments as they come, different jobs at once, each job's events in
        order (EventConsumer.run_by_key): a job whose pods take long, or whose creation is
        retried through an apiserver's bad minute, holds up only its own events. A stop lets
        what is in hand finish and commit, cancelling only the poll."""
        self._consumed.clear()
        try:
            await consumer.run_by_key(self._stop_requested)
        except BackendError as error:
            if not (error.transient and self._stopping):
                raise
            log.warning(
                "stopping before an assignment could be carried out (it comes again after "
                "a restart): %s",
                error,
                extra=self._extra(),
            )
        finally:
            self._consumed.set()

    async def _count_dead_letter(self, record: Record, reason: str) -> None:
        self.metrics.dead_letters.labels(self.cluster).inc()

    def _extra(self, uid: str | None = None) -> dict[str, str | None]:
        return {"cluster": self.cluster, "job": uid}

    # -- assignments ----------------------------------------------------------------------

    async def _on_assignment_event(self, event: CloudEvent, record: Record) -> None:
        """Carry the event out; a transient refusal is tried again with backoff (the job's
        lock is let go in between, so sweeps and its pods go on) until it passes or the worker
        stops, and the event is committed only then. A refusal for good is raised."""
        if event.type == EventType.LOGS_REQUESTED:
            # Answered in a task of its own: reading logs never holds up assignments.
            self.log_requests.handle(event.data_as(LogsRequested))
            return

        def retrying(error: BaseException, failures: int, wait: float) -> None:
            log.warning(
                "%s not carried out (try %d), trying again in %.1fs: %s",
                event.type,
                failures,
                wait,
                error,
                extra=self._extra(event.subject),
            )

        await retry_transient(
            lambda: self._apply(event),
            WORK_RETRY,
            transient=is_transient,
            on_retry=retrying,
            keep_trying=lambda: not self._stopping,
        )

    async def _apply(self, event: CloudEvent) -> None:
        """One event of the assignments topic, under its job's lock."""
        data: JobAssigned | JobRevoked | JobRef
        if event.type == EventType.JOB_ASSIGNED:
            data = event.data_as(JobAssigned)
        elif event.type == EventType.JOB_REVOKED:
            data = event.data_as(JobRevoked)
        elif event.type in (EventType.JOB_SUSPENDED, EventType.JOB_RESUMED):
            data = event.data_as(JobRef)
        else:
            raise ValueError(f"unexpected event type {event.type!r} on an assignments topic")
        async with self._locks.job(data.uid):
            if isinstance(data, JobAssigned):
                await self._start_job(data)
            elif isinstance(data, JobRevoked):
                await self._revoke(data)
            elif event.type == EventType.JOB_SUSPENDED:
                await self._suspend(data)
            else:
                await self._resume(data)

    async def _start_job(self, assigned: JobAssigned) -> None:
        if assigned.attempt < self._outdated_below.get(assigned.uid, 0):
            log.info(
                "not starting attempt %d: revoked or replaced while this worker was away",
                assigned.attempt,
                extra=self._extra(assigned.uid),
            )
            return
        known = self.runs.get(assigned.uid)
        if known is not None and known.attempt >= assigned.attempt:
            # Redelivered, or tried again after a transient refusal: make what is missing.
            await self._catch_up(known)
            return
        if known is not None:
            # Deleted before forgotten: a retry after a transient refusal deletes again.
            await self.backend.delete_job(assigned.uid, known.job.metadata.namespace)
            self._forget(known)
        job = parse_job(assigned.job)
        rendered = render_job(
            job,
            self.backend.network(),
            attempt=assigned.attempt,
            wait_for_master=self.backend.init_containers,
        )
        run = JobRun(rendered, self.cluster, assigned.attempt, conditions=assigned.conditions)
        self.runs[job.uid] = run
        # Created goes out before any pod exists, so no pod phase can overtake it.
        await self._publish(run)
        self._unprepared.add(job.uid)
        await self._decide(run, run.start())
        if run.finished:
            return  # refused
        if run.suspended:
            log.info("arrived suspended: no pods until it is resumed", extra=self._extra(job.uid))
        else:
            log.info(
                "created %d pods and %d services",
                len(rendered.pods),
                len(rendered.services),
                extra=self._extra(job.uid),
            )

    async def _refused(self, run: JobRun, error: BackendError) -> None:
        """The cluster refused the job's objects for good: remove what exists, fail the job."""
        uid = run.job.uid
        self._queued.pop(uid, None)
        self._unprepared.discard(uid)
        log.error("the cluster refused the job: %s", error, extra=self._extra(uid))
        try:
            await self.backend.delete_job(uid, run.job.metadata.namespace)
        except BackendError as cleanup:
            log.error("cannot delete the job's objects: %s", cleanup, extra=self._extra(uid))
        message = f"{run.kind} {run.name} cannot run on {self.cluster}: {error}"
        await self._after(run, run.fail("Failed", message))

    async def _revoke(self, revoked: JobRevoked) -> None:
        run = self.runs.get(revoked.uid)
        if run is not None and run.attempt > revoked.attempt:
            return
        namespace = None
        if run is not None:
            namespace = run.job.metadata.namespace
            self._forget(run)
        try:
            await self.backend.delete_job(revoked.uid, namespace)
        except BackendError as error:
            if error.transient:
                raise
            # Refused for good (say, an identity that may not list where it would have to
            # look): said, and the revocation done with; dying on it would only replay it.
            log.error(
                "cannot delete the revoked job's objects: %s", error, extra=self._extra(revoked.uid)
            )
            return
        log.info("revoked: %s", revoked.reason, extra=self._extra(revoked.uid))

    async def _suspend(self, ref: JobRef) -> None:
        run = self.runs.get(ref.uid)
        if run is None:
            log.info("suspend for a job not on this cluster ignored", extra=self._extra(ref.uid))
            return
        await self._decide(run, run.suspend())
        if run.suspended:
            self._reports.report_soon()  # its capacity is free now

    async def _resume(self, ref: JobRef) -> None:
        run = self.runs.get(ref.uid)
        if run is None:
            log.info("resume for a job not on this cluster ignored", extra=self._extra(ref.uid))
            return
        # Observations of the pods the suspension deleted must not land on their successors.
        await self._observations.drain(ref.uid)
        await self._decide(run, run.resume())

    # -- pods -----------------------------------------------------------------------------

    async def _observe(self, obs: PodObservation) -> None:
        """One observation of a job's pod (its lock is held; see `ObservationLanes`)."""
        run = self.runs.get(obs.job_uid)
        if run is not None:
            await self._decide(run, run.observe(obs))

    async def _decide(self, run: JobRun, decision: Decision) -> None:
        """Carry a decision out, after whatever of the run's earlier ones a transient refusal
        interrupted."""
        self._queued.setdefault(run.job.uid, []).append(decision)
        await self._catch_up(run)

    async def _catch_up(self, run: JobRun) -> None:
        """Make the run's missing ConfigMaps and access objects, then carry out its queued
        decisions in order (its lock is held). A cluster that refuses for good fails the job; a
        transient refusal leaves the rest queued, for the event's retry, the run's next
        decision or the catch-up loop, and is raised."""
        uid = run.job.uid
        try:
            if uid in self._unprepared:
                for config_map in run.rendered.config_maps:
                    await self.backend.create_config_map(uid, config_map)
                for access in run.rendered.access:
                    await self.backend.create_access(uid, access)
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

    async def _catch_up_loop(self) -> None:
        """Retry, with backoff, the work transient refusals left behind (when nothing else
        has retried it first)."""
        while True:
            await self._interrupted.wait()
            if self._queued or self._unprepared:
                await retry_transient(
                    self._catch_up_all,
                    WORK_RETRY,
                    transient=is_transient,  # _catch_up fails jobs refused for good
                    on_retry=self._still_refused,
                    failed_with=WorkStillQueued("interrupted by a transient refusal"),
                )
            self._interrupted.clear()

    async def _catch_up_all(self) -> None:
        """One pass over the work transient refusals left behind, job by job."""
        for uid in sorted(self._queued.keys() | self._unprepared):
            async with self._locks.job(uid):
                run = self.runs.get(uid)
                if run is None:
                    self._queued.pop(uid, None)
                    self._unprepared.discard(uid)
                else:
                    await self._catch_up(run)
        if self._queued or self._unprepared:
            raise WorkStillQueued("interrupted again meanwhile")

    def _still_refused(self, error: BaseException, failures: int, wait: float) -> None:
        if not isinstance(error, WorkStillQueued):
            log.warning("interrupted work still refused: %s", error, extra=self._extra())

    async def _carry_out(self, run: JobRun, decision: Decision) -> None:
        """The steps of a decision, each taken off it once done: one that a transient refusal
        interrupted goes on where it stopped."""
        uid = run.job.uid
        while decision.restart:
            pod = decision.restart[0]
            await self.backend.delete_pod(uid, pod.name, pod.namespace)
            await self._create_pod(run, pod)
            decision.restart.pop(0)
            self.metrics.pod_restarts.labels(self.cluster).inc()
        if decision.restarted_in_place:
            self.metrics.pod_restarts.labels(self.cluster).inc(decision.restarted_in_place)
            decision.restarted_in_place = 0
        while decision.delete:
            pod = decision.delete[0]
            await self.backend.delete_pod(uid, pod.name, pod.namespace)
            decision.delete.pop(0)
        await self._create_pods(run, decision.create)
        while decision.config_maps:
            await self.backend.update_config_map(uid, decision.config_maps[0])
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
                await self.backend.create_service(run.job.uid, service)
            await self.backend.create_pod(run.job.uid, pod)
        self.metrics.pods_created.labels(self.cluster).inc()

    async def _after(self, run: JobRun, decision: Decision) -> None:
        """Tell the hub what changed and set the run's next timer."""
        if decision.changed:
            await self._publish(run)
        if decision.unschedulable and run.pending_reason:
            await self._publish(run, UNSCHEDULABLE_REASON, run.pending_reason)
        self._arm(run)
        if decision.finished:
            # Freed capacity should reach the hub now, not at the next periodic heartbeat.
            self._reports.report_soon()

    # -- timers: activeDeadlineSeconds while active, ttlSecondsAfterFinished after --------

    def _arm(self, run: JobRun) -> None:
        uid = run.job.uid
        due = run.next_timer()
        current = self._timers.get(uid)
        if current is not None and current.due == due and not current.task.done():
            return
        self._cancel_timer(uid)
        if due is not None:
            task = self._tasks.spawn(self._fire_at(run, due), f"timer-{uid}")
            self._timers[uid] = _Timer(due, task)

    def _cancel_timer(self, uid: str) -> None:
        timer = self._timers.pop(uid, None)
        if timer is not None and timer.task is not asyncio.current_task():
            timer.task.cancel()

    async def _fire_at(self, run: JobRun, due: datetime) -> None:
        delay = (due - run.clock()).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)

        def retrying(error: BaseException, failures: int, wait: float) -> None:
            log.warning(
                "timer not carried out, trying again in %.1fs: %s",
                wait,
                error,
                extra=self._extra(run.job.uid),
            )

        await retry_transient(
            lambda: self._fire(run), WORK_RETRY, transient=is_transient, on_retry=retrying
        )

    async def _fire(self, run: JobRun) -> None:
        uid = run.job.uid
        async with self._locks.job(uid):
            timer = self._timers.get(uid)
            if timer is not None and timer.task is asyncio.current_task():
                del self._timers[uid]
            if self.runs.get(uid) is not run:
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
            self._arm(run)
            return
        await self.backend.delete_job(uid, run.job.metadata.namespace)
        self._forget(run)
        log.info("deleted after ttlSecondsAfterFinished", extra=self._extra(uid))

    def _forget(self, run: JobRun) -> None:
        uid = run.job.uid
        self._cancel_timer(uid)
        if self.runs.get(uid) is run:
            del self.runs[uid]
            self._queued.pop(uid, None)
            self._unprepared.discard(uid)
        self._export_jobs()

    # -- status ---------------------------------------------------------------------------

    async def _publish(
        self, run: JobRun, reason: str | None = None, message: str | None = None
    ) -> None:
        """The run's status; reason and message are the latest condition's unless given."""
        run.sequence += 1
        job = run.job
        condition = run.status.conditions[-1] if run.status.conditions else None
        if reason is None and condition is not None:
            reason, message = condition.reason, condition.message
        update = JobStatusUpdate(
            uid=job.uid,
            name=job.metadata.name,
            namespace=job.metadata.namespace,
            kind=job.kind,
            framework=job.FRAMEWORK,
            phase=run.phase,
            cluster=self.cluster,
            attempt=run.attempt,
            sequence=run.sequence,
            reason=reason or run.phase.value,
            message=message,
            status=run.status.model_copy(deep=True),
        )
        await publish_payload(
            self.bus, self.topics.status, job.uid, EventType.JOB_STATUS, self.config.source, update
        )
        self._export_jobs()

    def _export_jobs(self) -> None:
        counts = Counter((r.phase.value, r.job.FRAMEWORK) for r in self.runs.values())
        for phase, framework in self._exported - set(counts):
            self.metrics.jobs.labels(self.cluster, phase, framework).set(0)
        for (phase, framework), n in counts.items():
            self.metrics.jobs.labels(self.cluster, phase, framework).set(n)
        self._exported |= set(counts)

    # -- heartbeats -----------------------------------------------------------------------

    async def _unschedulable_loop(self) -> None:
        period = max(0.1, min(5.0, self.config.unschedulable_timeout / 4))
        while True:
            await asyncio.sleep(period)
            await self._hand_back_unschedulable()

    async def _hand_back_unschedulable(self) -> None:
        now = datetime.now(UTC).timestamp()
        for run in list(self.runs.values()):
            since = run.unschedulable_since
            if run.finished or since is None or now - since < self.config.unschedulable_timeout:
                continue
            reason = f"pods unschedulable for {now - since:.0f}s: {run.pending_reason or ''}"
            try:
                await self.hand_back(run, reason)
            except BackendError as error:
                if not error.transient:
                    raise
                log.warning(
                    "cannot hand back yet (next round tries again): %s",
                    error,
                    extra=self._extra(run.job.uid),
                )

    async def hand_back(self, run: JobRun, reason: str, *, stopping: bool = False) -> None:
        """Delete the job here and ask the hub to place it on another cluster (unless the run
        is gone or replaced by the time its lock is had). `stopping`: this worker stops, as
        it was asked to (logged as news, not as a warning)."""
        uid = run.job.uid
        async with self._locks.job(uid):
            if self.runs.get(uid) is not run:
                return
            await self.backend.delete_job(uid, run.job.metadata.namespace)
            self._forget(run)
            back = JobHandedBack(uid=uid, cluster=self.cluster, attempt=run.attempt, reason=reason)
            await publish_payload(
                self.bus,
                self.topics.status,
                uid,
                EventType.JOB_HANDED_BACK,
                self.config.source,
                back,
            )
            level = logging.INFO if stopping else logging.WARNING
            log.log(level, "handed back: %s", reason, extra=self._extra(uid))

    async def heartbeat(self) -> ClusterSnapshot:
        """Read the capacity and report it; after a heartbeat that failed or came late, the
        jobs the hub may have moved away are deleted first (see `CapacityReports`)."""
        return await self._reports.heartbeat()
