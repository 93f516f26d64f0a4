"""What a worker tells about its jobs: each run's status on the status topic (the hub and the
producers follow it), and the gauge of the worker's jobs by phase and framework."""

from __future__ import annotations

from collections import Counter

from bus.base import Bus
from bus.events import publish_payload
from bus.topics import Topics
from schemas.events import EventType, JobStatusUpdate
from workers.job_run import JobRun
from workers.metrics import WorkerMetrics
from workers.worker_config import WorkerConfig


class JobStatuses:
    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        config: WorkerConfig,
        metrics: WorkerMetrics,
        runs: dict[str, JobRun],
    ) -> None:
        self._bus = bus
        self._topics = topics
        self._config = config
        self._metrics = metrics
        self._runs = runs
        self._exported: set[tuple[str, str]] = set()
        """(phase, framework) pairs the gauge has shown: set to 0 once no job has them."""

    async def publish(
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
            cluster=self._config.cluster,
            attempt=run.attempt,
            sequence=run.sequence,
            reason=reason or run.phase.value,
            message=message,
            status=run.status.model_copy(deep=True),
        )
        await publish_payload(
            self._bus,
            self._topics.status,
            job.uid,
            EventType.JOB_STATUS,
            self._config.source,
            update,
        )
        self.count_jobs()

    def count_jobs(self) -> None:
        """Set the gauge of jobs by phase and framework to the runs in hand."""
        cluster = self._config.cluster
        counts = Counter((r.phase.value, r.job.FRAMEWORK) for r in self._runs.values())
        for phase, framework in self._exported - set(counts):
            self._metrics.jobs.labels(cluster, phase, framework).set(0)
        for (phase, framework), n in counts.items():
            self._metrics.jobs.labels(cluster, phase, framework).set(n)
        self._exported |= set(counts)
