"""A worker: runs the jobs the hub assigns to its cluster and reports their status."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from bus.aiotasks import TaskOwner
from bus.base import Bus, Record
from bus.events import EventConsumer, publish_event
from bus.topics import Topics
from schemas.cluster import ClusterSnapshot
from schemas.events import (
    CloudEvent,
    EventType,
    JobAssigned,
    JobRevoked,
    JobStatusUpdate,
    make_event,
)
from schemas.job_parsing import parse_job
from workers.backends.base import Backend, PodObservation
from workers.job_run import JobRun
from workers.metrics import worker_metrics
from workers.rendering import render_job

log = logging.getLogger(__name__)


@dataclass
class WorkerConfig:
    cluster: str
    heartbeat_interval: float = 5.0
    labels: dict[str, str] | None = None
    namespaces: list[str] | None = None

    @property
    def source(self) -> str:
        return f"trainhub/worker/{self.cluster}"


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
        self.runs: dict[str, JobRun] = {}
        self._tasks = TaskOwner(f"worker-{config.cluster}")
        self._consumer: EventConsumer | None = None
        self._heartbeat_seq = 0

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
        await self._consumer.subscription.start()
        await self.heartbeat()
        self._tasks.spawn(self._consumer.run(), "assignments")
        self._tasks.spawn(self._observe_loop(), "observe")
        self._tasks.spawn(self._heartbeat_loop(), "heartbeat")
        log.info("worker started", extra={"cluster": self.cluster, "backend": self.backend.kind})

    @property
    def crashed(self) -> asyncio.Future[BaseException] | None:
        """Resolves with the exception of a background task that died."""
        return self._tasks.failed

    async def stop(self) -> None:
        await self._tasks.cancel_all()
        if self._consumer is not None:
            await self._consumer.subscription.stop()
        await self.backend.close()
        log.info("worker stopped", extra={"cluster": self.cluster})

    async def _count_dead_letter(self, record: Record, reason: str) -> None:
        self.metrics.dead_letters.labels(self.cluster).inc()

    # -- assignments ----------------------------------------------------------------------

    async def _on_assignment_event(self, event: CloudEvent, record: Record) -> None:
        if event.type == EventType.JOB_ASSIGNED:
            await self._start_job(event.data_as(JobAssigned))
        elif event.type == EventType.JOB_REVOKED:
            await self._revoke(event.data_as(JobRevoked))
        else:
            raise ValueError(f"unexpected event type {event.type!r} on an assignments topic")

    async def _start_job(self, assigned: JobAssigned) -> None:
        known = self.runs.get(assigned.uid)
        if known is not None and known.attempt >= assigned.attempt:
            return  # redelivered assignment: the pods exist already
        if known is not None:
            await self.backend.delete_job(assigned.uid)
        job = parse_job(assigned.job)
        rendered = render_job(job, self.backend.network(), attempt=assigned.attempt)
        run = JobRun(rendered, self.cluster, assigned.attempt)
        self.runs[job.uid] = run
        # Created goes out before any pod exists, so no pod phase can overtake it.
        await self._publish(run, "Created", f"creating pods on {self.cluster}")
        for service in rendered.services:
            await self.backend.create_service(job.uid, service)
        for pod in rendered.pods:
            await self.backend.create_pod(job.uid, pod)
            self.metrics.pods_created.labels(self.cluster).inc()
        log.info(
            "created %d pods and %d services",
            len(rendered.pods),
            len(rendered.services),
            extra={"job": job.uid, "cluster": self.cluster},
        )

    async def _revoke(self, revoked: JobRevoked) -> None:
        run = self.runs.get(revoked.uid)
        if run is not None and run.attempt > revoked.attempt:
            return
        await self.backend.delete_job(revoked.uid)
        self.runs.pop(revoked.uid, None)
        log.info("revoked: %s", revoked.reason, extra={"job": revoked.uid, "cluster": self.cluster})

    # -- pods -----------------------------------------------------------------------------

    async def _observe_loop(self) -> None:
        while True:
            observation = await self.backend.observations.get()
            await self.on_observation(observation)

    async def on_observation(self, obs: PodObservation) -> None:
        run = self.runs.get(obs.job_uid)
        if run is None:
            return
        decision = run.observe(obs)
        for pod in decision.restart:
            await self.backend.delete_pod(run.job.uid, pod.name, pod.namespace)
            await self.backend.create_pod(run.job.uid, pod)
            self.metrics.pod_restarts.labels(self.cluster).inc()
        if decision.changed:
            await self._publish(run, run.phase.value, obs.message)
        if decision.finished:
            for pod in run.pods_to_clean():
                await self.backend.delete_pod(run.job.uid, pod.name, pod.namespace)
            # Freed capacity should reach the hub now, not at the next periodic heartbeat.
            await self.heartbeat()

    async def _publish(self, run: JobRun, reason: str, message: str | None) -> None:
        run.sequence += 1
        job = run.job
        condition = run.status.conditions[-1] if run.status.conditions else None
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
            reason=condition.reason if condition else reason,
            message=condition.message if condition else message,
            status=run.status.model_copy(deep=True),
        )
        event = make_event(EventType.JOB_STATUS, self.config.source, job.uid, update)
        await publish_event(self.bus, self.topics.status, job.uid, event)
        self._export_jobs()

    def _export_jobs(self) -> None:
        counts = Counter((r.phase.value, r.job.FRAMEWORK) for r in self.runs.values())
        for (phase, framework), n in counts.items():
            self.metrics.jobs.labels(self.cluster, phase, framework).set(n)

    # -- heartbeats -----------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            await self.heartbeat()

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
