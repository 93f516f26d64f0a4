"""A worker: runs the jobs the hub assigns to its cluster and reports their status.

Every change to a run (an assignment, a suspension, a pod observation, a timer) happens under
one lock, so the backend calls that carry out one decision never interleave with another's.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from bus.aiotasks import TaskOwner
from bus.base import Bus, Record
from bus.events import EventConsumer, events_to_end, publish_event
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
    make_event,
)
from schemas.job_parsing import parse_job
from workers.backends.base import Backend, BackendError, PodObservation
from workers.job_run import Decision, JobRun
from workers.log_requests import LogRequests
from workers.metrics import worker_metrics
from workers.rendering import PodPlan, render_job

log = logging.getLogger(__name__)

UNSCHEDULABLE_REASON = "Unschedulable"
_POLL_TIMEOUT = 0.5
_STOP_GRACE = 30.0
_CREATE_CONCURRENCY = 16
"""How long a stopping worker lets the assignments it is handling finish."""


@dataclass
class WorkerConfig:
    cluster: str
    heartbeat_interval: float = 5.0
    labels: dict[str, str] | None = None
    namespaces: list[str] | None = None
    unschedulable_timeout: float = 120.0
    """Seconds a job's pods may stay unschedulable before the job is handed back."""

    @property
    def source(self) -> str:
        return f"trainhub/worker/{self.cluster}"


@dataclass
class _Timer:
    due: datetime
    task: asyncio.Task[None]


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
        self._heartbeat_seq = 0
        self._lock = asyncio.Lock()
        self._timers: dict[str, _Timer] = {}
        self._exported: set[tuple[str, str]] = set()
        self._stopping = False
        self._batch_done = asyncio.Event()
        self._batch_done.set()

    @property
    def cluster(self) -> str:
        return self.config.cluster

    async def start(self) -> None:
        await self.backend.start()
        await self.bus.create_topics(
            [*self.topics.shared_specs(), self.topics.assignment_spec(self.cluster)]
        )
        self._consumer = EventConsumer(
            self.bus,
            [self.topics.assignments(self.cluster)],
            self._on_assignment_event,
            group=f"{self.topics.prefix}-worker-{self.cluster}",
            dead_letter_topic=self.topics.dead_letters,
            component=self.config.source,
            on_dead_letter=self._count_dead_letter,
        )
        await self._adopt()
        await self._consumer.subscription.start()
        await self.heartbeat()
        self._tasks.spawn(self._consume(self._consumer), "assignments")
        lag = {self.topics.assignments(self.cluster): self._consumer.subscription}
        self._tasks.spawn(self.metrics.lag_sampler(lag).run(), "lag")
        self._tasks.spawn(self._observe_loop(), "observe")
        self._tasks.spawn(self._heartbeat_loop(), "heartbeat")
        self._tasks.spawn(self._unschedulable_loop(), "unschedulable")
        log.info("worker started", extra={"cluster": self.cluster, "backend": self.backend.kind})

    async def _adopt(self) -> None:
        """After a restart: take back the jobs whose objects are still in the cluster, and
        delete the objects of jobs that were revoked or that this cluster never had.

        The assignments topic says what the hub wants here (its newest event per job); the
        cluster says what exists. Adopted runs create nothing: the backend's first listing
        reports their pods, and status continues from there."""
        try:
            existing = await self.backend.job_uids()
        except BackendError as error:
            # E.g. an identity that may not list cluster-wide: run without adoption.
            log.warning("cannot look for jobs to adopt: %s", error, extra=self._extra())
            return
        if not existing:
            return
        wanted = await self._replay_assignments()
        for uid in existing:
            assigned = wanted.get(uid)
            if assigned is None:
                log.warning("deleting objects of a job not assigned here", extra=self._extra(uid))
                await self.backend.delete_job(uid)
                continue
            job = parse_job(assigned.job)
            rendered = render_job(
                job,
                self.backend.network(),
                attempt=assigned.attempt,
                wait_for_master=self.backend.init_containers,
            )
            self.runs[uid] = JobRun(rendered, self.cluster, assigned.attempt)
            log.info("adopted a running job", extra=self._extra(uid))
        self._export_jobs()

    async def _replay_assignments(self) -> dict[str, JobAssigned]:
        """The newest assignment of each job still placed here, from the whole topic."""
        wanted: dict[str, JobAssigned] = {}
        async for event in events_to_end(self.bus, self.topics.assignments(self.cluster)):
            try:
                if event.type == EventType.JOB_ASSIGNED:
                    assigned = event.data_as(JobAssigned)
                    wanted[assigned.uid] = assigned
                elif event.type == EventType.JOB_REVOKED:
                    revoked = event.data_as(JobRevoked)
                    known = wanted.get(revoked.uid)
                    if known is not None and known.attempt <= revoked.attempt:
                        del wanted[revoked.uid]
            except ValueError:
                continue  # the live consumer dead-letters it
        return wanted

    @property
    def crashed(self) -> asyncio.Future[BaseException] | None:
        """Resolves with the exception of a background task that died."""
        return self._tasks.failed

    async def stop(self) -> None:
        """Stop consuming, let the batch in hand finish and commit, then close."""
        self._stopping = True
        try:
            await asyncio.wait_for(self._batch_done.wait(), _STOP_GRACE)
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
                    await self.hand_back(run, f"worker of {self.cluster} stopped")
        await self.backend.close()
        log.info("worker stopped", extra=self._extra())

    async def _consume(self, consumer: EventConsumer) -> None:
        """Poll and handle batches; each batch is committed before the next poll, and a stop
        waits for the batch in hand (cancelling only an idle poll)."""
        while not self._stopping:
            records = await consumer.subscription.poll(timeout=_POLL_TIMEOUT)
            if not records:
                consumer.idle.set()
                continue
            consumer.idle.clear()
            self._batch_done.clear()
            try:
                await consumer.process(records)
            finally:
                self._batch_done.set()

    async def _count_dead_letter(self, record: Record, reason: str) -> None:
        self.metrics.dead_letters.labels(self.cluster).inc()

    def _extra(self, uid: str | None = None) -> dict[str, str | None]:
        return {"cluster": self.cluster, "job": uid}

    # -- assignments ----------------------------------------------------------------------

    async def _on_assignment_event(self, event: CloudEvent, record: Record) -> None:
        if event.type == EventType.LOGS_REQUESTED:
            # Answered in a task of its own: reading logs never holds up assignments.
            self.log_requests.handle(event.data_as(LogsRequested))
            return
        async with self._lock:
            if event.type == EventType.JOB_ASSIGNED:
                await self._start_job(event.data_as(JobAssigned))
            elif event.type == EventType.JOB_REVOKED:
                await self._revoke(event.data_as(JobRevoked))
            elif event.type == EventType.JOB_SUSPENDED:
                await self._suspend(event.data_as(JobRef))
            elif event.type == EventType.JOB_RESUMED:
                await self._resume(event.data_as(JobRef))
            else:
                raise ValueError(f"unexpected event type {event.type!r} on an assignments topic")

    async def _start_job(self, assigned: JobAssigned) -> None:
        known = self.runs.get(assigned.uid)
        if known is not None and known.attempt >= assigned.attempt:
            return  # redelivered assignment: the pods exist already
        if known is not None:
            self._forget(known)
            await self.backend.delete_job(assigned.uid)
        job = parse_job(assigned.job)
        rendered = render_job(
            job,
            self.backend.network(),
            attempt=assigned.attempt,
            wait_for_master=self.backend.init_containers,
        )
        run = JobRun(rendered, self.cluster, assigned.attempt)
        self.runs[job.uid] = run
        # Created goes out before any pod exists, so no pod phase can overtake it.
        await self._publish(run)
        try:
            for config_map in rendered.config_maps:
                await self.backend.create_config_map(job.uid, config_map)
            for access in rendered.access:
                await self.backend.create_access(job.uid, access)
            await self._carry_out(run, run.start())
        except BackendError as error:
            if error.transient:
                raise  # not committed: the assignment comes again after a restart
            await self._refused(run, error)
            return
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
        log.error("the cluster refused the job: %s", error, extra=self._extra(uid))
        try:
            await self.backend.delete_job(uid)
        except BackendError as cleanup:
            log.error("cannot delete the job's objects: %s", cleanup, extra=self._extra(uid))
        message = f"{run.kind} {run.name} cannot run on {self.cluster}: {error}"
        await self._after(run, run.fail("Failed", message))

    async def _revoke(self, revoked: JobRevoked) -> None:
        run = self.runs.get(revoked.uid)
        if run is not None and run.attempt > revoked.attempt:
            return
        if run is not None:
            self._forget(run)
        await self.backend.delete_job(revoked.uid)
        log.info("revoked: %s", revoked.reason, extra=self._extra(revoked.uid))

    async def _suspend(self, ref: JobRef) -> None:
        run = self.runs.get(ref.uid)
        if run is None:
            log.info("suspend for a job not on this cluster ignored", extra=self._extra(ref.uid))
            return
        await self._decide(run, run.suspend())
        if run.suspended:
            await self.heartbeat()  # its capacity is free now

    async def _resume(self, ref: JobRef) -> None:
        run = self.runs.get(ref.uid)
        if run is None:
            log.info("resume for a job not on this cluster ignored", extra=self._extra(ref.uid))
            return
        # Observations of the pods the suspension deleted must not land on their successors.
        await self._drain_observations()
        await self._decide(run, run.resume())

    # -- pods -----------------------------------------------------------------------------

    async def _observe_loop(self) -> None:
        while True:
            observation = await self.backend.observations.get()
            await self.on_observation(observation)

    async def on_observation(self, obs: PodObservation) -> None:
        async with self._lock:
            await self._observe(obs)

    async def _observe(self, obs: PodObservation) -> None:
        run = self.runs.get(obs.job_uid)
        if run is not None:
            await self._decide(run, run.observe(obs))

    async def _drain_observations(self) -> None:
        """Handle the observations queued so far, here and now (the lock is held)."""
        queue = self.backend.observations
        for _ in range(queue.qsize()):
            await self._observe(queue.get_nowait())

    async def _decide(self, run: JobRun, decision: Decision) -> None:
        """Carry a decision out; a cluster that refuses for good fails the job."""
        try:
            await self._carry_out(run, decision)
        except BackendError as error:
            if error.transient:
                raise
            await self._refused(run, error)

    async def _carry_out(self, run: JobRun, decision: Decision) -> None:
        uid = run.job.uid
        for pod in decision.restart:
            await self.backend.delete_pod(uid, pod.name, pod.namespace)
            await self._create_pod(run, pod)
            self.metrics.pod_restarts.labels(self.cluster).inc()
        if decision.restarted_in_place:
            self.metrics.pod_restarts.labels(self.cluster).inc(decision.restarted_in_place)
        for pod in decision.delete:
            await self.backend.delete_pod(uid, pod.name, pod.namespace)
        await self._create_pods(run, decision.create)
        await self._after(run, decision)

    async def _create_pods(self, run: JobRun, pods: list[PodPlan]) -> None:
        """Create a job's pods concurrently (an apiserver round trip each), a bounded number
        at a time; the first failure is raised once every create has settled."""
        limit = asyncio.Semaphore(_CREATE_CONCURRENCY)

        async def create(pod: PodPlan) -> None:
            async with limit:
                await self._create_pod(run, pod)

        results = await asyncio.gather(*(create(p) for p in pods), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _create_pod(self, run: JobRun, pod: PodPlan) -> None:
        """The pod and its Service (deleting a pod takes its Service along)."""
        service = next((s for s in run.rendered.services if s.name == pod.name), None)
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
            await self.heartbeat()

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
        async with self._lock:
            uid = run.job.uid
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
        self._forget(run)
        await self.backend.delete_job(uid)
        log.info("deleted after ttlSecondsAfterFinished", extra=self._extra(uid))

    def _forget(self, run: JobRun) -> None:
        uid = run.job.uid
        self._cancel_timer(uid)
        if self.runs.get(uid) is run:
            del self.runs[uid]
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
        event = make_event(EventType.JOB_STATUS, self.config.source, job.uid, update)
        await publish_event(self.bus, self.topics.status, job.uid, event)
        self._export_jobs()

    def _export_jobs(self) -> None:
        counts = Counter((r.phase.value, r.job.FRAMEWORK) for r in self.runs.values())
        for phase, framework in self._exported - set(counts):
            self.metrics.jobs.labels(self.cluster, phase, framework).set(0)
        for (phase, framework), n in counts.items():
            self.metrics.jobs.labels(self.cluster, phase, framework).set(n)
        self._exported |= set(counts)

    # -- heartbeats -----------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            await self.heartbeat()

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
            await self.hand_back(
                run, f"pods unschedulable for {now - since:.0f}s: {run.pending_reason or ''}"
            )

    async def hand_back(self, run: JobRun, reason: str) -> None:
        """Delete the job here and ask the hub to place it on another cluster."""
        async with self._lock:
            uid = run.job.uid
            await self.backend.delete_job(uid)
            self._forget(run)
            back = JobHandedBack(uid=uid, cluster=self.cluster, attempt=run.attempt, reason=reason)
            event = make_event(EventType.JOB_HANDED_BACK, self.config.source, uid, back)
            await publish_event(self.bus, self.topics.status, uid, event)
            log.warning("handed back: %s", reason, extra=self._extra(uid))

    async def heartbeat(self) -> ClusterSnapshot:
        capacity = await self.backend.capacity()
        self._heartbeat_seq += 1
        snapshot = ClusterSnapshot(
            name=self.cluster,
            healthy=True,
            observedAt=datetime.now(UTC),
            nodes=capacity.nodes,
            labels=self.config.labels or {},
            namespaces=self.config.namespaces,
            backend=self.backend.kind,
            sequence=self._heartbeat_seq,
            jobs=sorted(capacity.jobs),
        )
        event = make_event(EventType.CLUSTER_HEARTBEAT, self.config.source, self.cluster, snapshot)
        await publish_event(self.bus, self.topics.clusters, self.cluster, event)
        self.metrics.heartbeats.labels(self.cluster).inc()
        for resource in {r for n in snapshot.nodes for r in n.allocatable}:
            self.metrics.free.labels(self.cluster, resource).set(float(snapshot.free(resource)))
        return snapshot
