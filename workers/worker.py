"""A worker: runs the jobs the hub assigns to its cluster and reports their status.

The worker wires its rooms together and carries out the assignments topic's events; the
rooms do the rest: `Adoption` (taking back a cluster's jobs after a restart, sweeping after
an outage), `DecisionExecutor` (carrying out what each `JobRun` decides), `RunTimers`
(deadlines, TTLs, the unschedulable timeout), `JobStatuses`, `CapacityReports`,
`ObservationLanes`, `LogRequests` and `PodRequests`.

A finished run stays in `runs` for `run_retention` after it finished, then leaves (see
`RunTimers`): a worker's memory and the cost of each event follow the jobs it runs, not
every job it ran. What a restarted worker knows comes from the bus and the cluster anyway.

Every change to a run (an assignment, a suspension, a pod observation, a timer) happens under
its job's lock, so the backend calls that carry out one decision never interleave with another
of the same job's, while different jobs go on at once; a sweep holds every job's lock.
A transient refusal of the cluster (its apiserver unreachable) never ends the worker: the work
it interrupted is tried again with backoff, and heartbeats pause until capacity can be read.

With a delegating backend (delegate mode) the worker makes no pods: `Delegation` hands each
job to the cluster's own operator and tells the status that operator reports.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry

from bus.aiotasks import TaskOwner
from bus.base import Bus, Record, TopicPartition
from bus.epochs import EpochFence
from bus.events import EventConsumer, publish_payload
from bus.retry import retry_transient
from bus.topics import Topics
from schemas.cluster import ClusterSnapshot
from schemas.events import (
    CloudEvent,
    EventType,
    JobAssigned,
    JobHandedBack,
    JobRef,
    JobRevoked,
    LogsRequested,
    PodsRequested,
)
from workers.adoption import Adoption, assigned_run
from workers.backends.base import (
    BACKEND_RETRY,
    Backend,
    BackendError,
    JobObjectNews,
    JobObjectSuspension,
    PodObservation,
    is_transient,
)
from workers.backends.delegating import DelegatingBackend
from workers.capacity_reports import CapacityReports
from workers.decision_executor import CREATE_CONCURRENCY, UNSCHEDULABLE_REASON, DecisionExecutor
from workers.delegation import Delegation
from workers.job_locks import JobLocks
from workers.job_run import JobRun
from workers.job_statuses import JobStatuses
from workers.log_requests import LogRequests
from workers.metrics import worker_metrics
from workers.observation_lanes import ObservationLanes
from workers.pod_requests import PodRequests
from workers.run_timers import RunTimers
from workers.worker_config import WorkerConfig

__all__ = ["CREATE_CONCURRENCY", "UNSCHEDULABLE_REASON", "Worker", "WorkerConfig"]

log = logging.getLogger(__name__)

_STOP_GRACE = 30.0
"""How long a stopping worker lets the assignments it is handling finish."""
_HAND_BACK_GRACE = 10.0
"""How long a stopping worker (whose pods die with it) spends handing its jobs back."""
_TOPICS_WAIT = 120.0
"""How long a starting worker waits for shared topics it may not create (the hub's)."""
_JOB_CONCURRENCY = 8
"""Jobs whose assignments are carried out at once (each job's events stay in order)."""
_VANISHED_WAIT = 120.0
"""How long a starting worker waits for its assignments consumer to reach where adoption's
read ended before it judges the jobs whose objects vanished (see `_fail_vanished`)."""


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
        self.pod_requests = PodRequests(
            bus, self.topics, backend, self.runs, cluster=config.cluster, source=config.source
        )
        self._tasks = TaskOwner(f"worker-{config.cluster}")
        self._consumer: EventConsumer | None = None
        self._locks = JobLocks()
        self._statuses = JobStatuses(bus, self.topics, config, self.metrics, self.runs)
        self._fence = EpochFence()
        """Refuses what a hub that lost its leadership sends (bus/epochs.py)."""
        self._adoption = Adoption(
            bus,
            self.topics,
            backend,
            self.runs,
            cluster=config.cluster,
            forget=self._forget,
            count_jobs=self._statuses.count_jobs,
            fence=self._fence,
        )
        self._reports = CapacityReports(
            bus,
            self.topics,
            backend,
            config,
            self.metrics,
            locks=self._locks,
            sweep=self._adoption.sweep,
        )
        self._timers = RunTimers(
            backend,
            self.runs,
            locks=self._locks,
            tasks=self._tasks,
            config=config,
            decide=lambda run, decision: self._executor.decide(run, decision),
            forget=self._forget,
            retire=self._retire,
            hand_back=self.hand_back,
        )
        self._executor = DecisionExecutor(
            backend,
            self.runs,
            self._statuses,
            self.metrics,
            cluster=config.cluster,
            locks=self._locks,
            arm=self._timers.arm,
            report_soon=self._reports.report_soon,
        )
        self._delegation: Delegation | None = None
        if isinstance(backend, DelegatingBackend):
            self._delegation = Delegation(
                backend,
                self.runs,
                self._statuses,
                cluster=config.cluster,
                locks=self._locks,
                finished=self._delegated_run_finished,
            )
        self._observations = ObservationLanes(
            backend.observations,
            self._observe,
            news=backend.job_object_news,
            locks=self._locks,
            tasks=self._tasks,
            cluster=config.cluster,
        )
        self._vanished: dict[str, JobAssigned] = {}
        """Jobs assigned here whose own object and all it owned went while no worker
        watched, or whose assignment the consumer has still to carry out (adoption's
        `vanished`): those still here once it has are failed."""
        self._read_to: dict[TopicPartition, int] = {}
        """Where adoption's read of the assignments topic ended, per partition."""
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self._consumed = asyncio.Event()
        """Clear while the assignments are consumed (set before start and after the stop)."""
        self._consumed.set()

    @property
    def cluster(self) -> str:
        return self.config.cluster

    async def start(self) -> None:
        await self.backend.start()
        # Under ACLs a worker may create only its own topics (assignments, reports): one
        # started before the hub waits for the shared ones rather than failing its first
        # heartbeat.
        await self.bus.create_topics(
            [
                *self.topics.shared_specs(),
                self.topics.assignment_spec(self.cluster),
                self.topics.reports_spec(self.cluster),
            ],
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
            fence=self._fence,
        )
        await self._adoption.adopt()
        self._vanished = dict(self._adoption.vanished)
        self._read_to = dict(self._adoption.read_to)
        await self._consumer.subscription.start()
        await self.heartbeat()
        self._tasks.spawn(self._consume(self._consumer), "assignments")
        if self._vanished:
            self._tasks.spawn(self._fail_vanished(self._consumer), "vanished")
        lag = {self.topics.assignments(self.cluster): self._consumer.subscription}
        self._tasks.spawn(self.metrics.lag_sampler(lag).run(), "lag")
        self._tasks.spawn(self._observations.run(), "observe")
        self._tasks.spawn(self._reports.run(), "heartbeat")
        self._tasks.spawn(self._reports.run_asked(), "heartbeat-asked")
        self._tasks.spawn(self._timers.run_unschedulable(), "unschedulable")
        self._tasks.spawn(self._timers.run_retirements(), "retirements")
        self._tasks.spawn(self._executor.run_catch_up(), "catch-up")
        if self._delegation is not None:
            self._tasks.spawn(self._delegation.run(), "delegated-statuses")
        log.info("worker started", extra={"cluster": self.cluster, "backend": self.backend.kind})

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
        await self.pod_requests.close()
        self._timers.clear()
        if self._consumer is not None:
            await self._consumer.subscription.stop()
        if not self.backend.keeps_pods:
            # Our pods die with this process: give their jobs back to be placed elsewhere.
            # Bounded: with the broker gone each hand-back would wait out the outage, and
            # the hub learns of the stop from the silence anyway.
            try:
                async with asyncio.timeout(_HAND_BACK_GRACE):
                    for run in list(self.runs.values()):
                        if not run.finished:
                            reason = f"worker of {self.cluster} stopped"
                            await self.hand_back(run, reason, stopping=True)
            except TimeoutError:
                log.warning(
                    "stopping before every job was handed back: the bus did not take them "
                    "within %.0fs (the hub moves them once it misses this cluster's heartbeat)",
                    _HAND_BACK_GRACE,
                    extra=self._extra(),
                )
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
        if event.type == EventType.PODS_REQUESTED:
            self.pod_requests.handle(event.data_as(PodsRequested))
            return
        if event.type == EventType.HUB_LEADER:
            log.info("a hub leads at epoch %s", event.epoch, extra=self._extra(None))
            return  # the fence has noted its epoch

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
            lambda: self._apply(event, record),
            BACKEND_RETRY,
            transient=is_transient,
            on_retry=retrying,
            keep_trying=lambda: not self._stopping,
        )

    async def _apply(self, event: CloudEvent, record: Record) -> None:
        """One event of the assignments topic (`record`), under its job's lock."""
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
                await self._start_job(data, record)
            elif isinstance(data, JobRevoked):
                await self._revoke(data)
            elif event.type == EventType.JOB_SUSPENDED:
                await self._suspend(data)
            else:
                await self._resume(data)

    async def _start_job(self, assigned: JobAssigned, record: Record) -> None:
        vanished = self._vanished.pop(assigned.uid, None)
        if (
            vanished is not None
            and vanished.attempt == assigned.attempt
            and record.offset >= self._read_to.get(record.tp, 0)
        ):
            # Written after adoption's read: the hub sending a restarted worker its jobs
            # again. Had this attempt's earlier assignment not been carried out, the
            # consumer would have brought that one first: it was, and its object went.
            await self._vanished_job(vanished)
            return
        if self._adoption.outdated(assigned):
            log.info(
                "not starting attempt %d: revoked or replaced while this worker was away",
                assigned.attempt,
                extra=self._extra(assigned.uid),
            )
            return
        known = self.runs.get(assigned.uid)
        if known is not None and known.attempt >= assigned.attempt:
            if known.finished and not self._executor.holds_work(assigned.uid):
                return  # nothing is missing of a job that ended (nor made again for it)
            # Redelivered, or tried again after a transient refusal: make what is missing.
            if self._delegation is not None:
                await self._delegation.start(known)
            else:
                await self._executor.catch_up(known)
            return
        if known is not None:
            # Deleted before forgotten: a retry after a transient refusal deletes again.
            await self.backend.delete_job(assigned.uid, known.job.metadata.namespace)
            self._forget(known)
        run = assigned_run(assigned, self.backend, self.cluster)
        job, rendered = run.job, run.rendered
        self.runs[job.uid] = run
        # Created goes out before any pod exists, so no pod phase can overtake it.
        await self._statuses.publish(run)
        if self._delegation is not None:
            await self._delegation.start(run)
            return
        self._executor.prepare(run)
        await self._executor.decide(run, run.start())
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

    async def _revoke(self, revoked: JobRevoked) -> None:
        self._vanished.pop(revoked.uid, None)
        run = self.runs.get(revoked.uid)
        if run is not None and run.attempt > revoked.attempt:
            return
        namespace = None
        if run is not None:
            namespace = run.job.metadata.namespace
            self._forget(run)
        else:
            self._timers.cancel(revoked.uid)  # the TTL of a run that left: done now
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
        if self._delegation is not None:
            await self._delegation.suspend(run)
            self._reports.report_soon()
            return
        await self._suspend_run(run)

    async def _suspend_run(self, run: JobRun) -> None:
        """Delete the run's pods, and tell it Suspended (its lock is held)."""
        await self._executor.decide(run, run.suspend())
        if run.suspended:
            self._reports.report_soon()  # its capacity is free now

    async def _resume(self, ref: JobRef) -> None:
        run = self.runs.get(ref.uid)
        if run is None:
            log.info("resume for a job not on this cluster ignored", extra=self._extra(ref.uid))
            return
        if self._delegation is not None:
            await self._delegation.resume(run)
            return
        await self._resume_run(run)

    async def _resume_run(self, run: JobRun) -> None:
        """Create the run's pods again (its lock is held)."""
        # Observations of the pods the suspension deleted must not land on their successors.
        await self._observations.drain(run.job.uid)
        await self._executor.decide(run, run.resume())

    # -- pods -----------------------------------------------------------------------------

    async def _observe(self, obs: PodObservation | JobObjectNews) -> None:
        """One observation of a job's pod, or news of its own object: its loss, or its
        `runPolicy.suspend` set there by someone else (its lock is held; see
        `ObservationLanes`)."""
        run = self.runs.get(obs.job_uid)
        if run is None:
            return
        if isinstance(obs, PodObservation):
            if self._delegation is not None:
                await self._delegation.observe(run, obs)  # the operator's pods
            else:
                await self._executor.decide(run, run.observe(obs))
        elif obs.attempt not in (None, run.attempt) or run.finished:
            return  # another attempt's object, or a run that ended: not this run's story
        elif isinstance(obs, JobObjectSuspension):
            # As the Training Operator follows its objects: suspended or resumed there.
            log.info(
                "%s through its object on the cluster",
                "suspended" if obs.suspend else "resumed",
                extra=self._extra(run.job.uid),
            )
            if obs.suspend:
                await self._suspend_run(run)
            else:
                await self._resume_run(run)
        else:
            # As in delegate mode when the operator's object goes: the job fails.
            await self._executor.object_deleted(run, obs.what)

    async def _fail_vanished(self, consumer: EventConsumer) -> None:
        """Fail the jobs whose own object went with everything it owned while no worker
        watched (a garbage collector took them after a `kubectl delete`), as a job whose
        object goes under a watching worker fails. Those the hub sends again (to a restarted
        worker) fail as their assignment comes (`_start_job`); the others once the consumer
        has carried out every assignment written before adoption's read: one it carried
        out now (past its committed offset) was not made before, and is not one of them."""
        try:
            async with asyncio.timeout(_VANISHED_WAIT):
                await self._consumed_to(consumer, self._read_to)
        except TimeoutError:
            log.warning(
                "%d jobs without objects here not judged: the assignments consumer did not "
                "reach where adoption's read ended within %.0fs",
                len(self._vanished),
                _VANISHED_WAIT,
                extra=self._extra(),
            )
            self._vanished.clear()
            return
        for uid in sorted(self._vanished):
            async with self._locks.job(uid):
                assigned = self._vanished.pop(uid, None)
                if assigned is not None and uid not in self.runs:
                    await self._vanished_job(assigned)

    async def _vanished_job(self, assigned: JobAssigned) -> None:
        """The assigned job's own object went with everything it owned while no worker
        watched: it fails as it would have under a watching worker (its lock is held)."""
        run = assigned_run(assigned, self.backend, self.cluster)
        self.runs[run.job.uid] = run
        what = f"{run.kind} {run.name}"
        log.warning(
            "%s and everything it owned went while no worker watched",
            what,
            extra=self._extra(run.job.uid),
        )
        if self._delegation is not None:
            await self._delegation.object_deleted(run)
        else:
            await self._executor.object_deleted(run, what)

    @staticmethod
    async def _consumed_to(consumer: EventConsumer, read_to: dict[TopicPartition, int]) -> None:
        """Until the consumer holds every partition, has polled past `read_to` in each, and
        has handled all it polled (it goes idle)."""
        subscription = consumer.subscription
        while True:
            if await subscription.unassigned() == 0:
                positions = await subscription.positions()
                if all(positions.get(tp, 0) >= end for tp, end in read_to.items()):
                    break
            await asyncio.sleep(0.2)
        consumer.idle.clear()
        await consumer.idle.wait()

    def _delegated_run_finished(self, run: JobRun) -> None:
        """A delegated run ended: it leaves after its retention, and its room is reported."""
        self._timers.retire_later(run)
        self._reports.report_soon()

    def _forget(self, run: JobRun) -> None:
        uid = run.job.uid
        self._timers.cancel(uid)
        if self.runs.get(uid) is run:
            del self.runs[uid]
            self._executor.drop(uid)
            self._statuses.uncount(uid)

    def _retire(self, run: JobRun) -> bool:
        """A finished run leaves (its lock is held; see `RunTimers`): its objects stay in the
        cluster, found again by their labels by a revocation or a log request. False while
        work a transient refusal interrupted is still to be done."""
        uid = run.job.uid
        if self._executor.holds_work(uid):
            return False
        if self.runs.get(uid) is run:
            del self.runs[uid]
            self._statuses.uncount(uid)
            self.backend.forget_job(uid)
        return True

    # -- handing back ---------------------------------------------------------------------

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
            back = JobHandedBack(
                uid=uid, cluster=self.cluster, attempt=run.attempt, reason=reason, stopping=stopping
            )
            await publish_payload(
                self.bus,
                self.topics.reports(self.cluster),
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
