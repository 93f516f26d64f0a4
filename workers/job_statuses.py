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
        self._counted: dict[str, tuple[str, str]] = {}
        """Each run in hand's (phase, framework) as the gauge counts it."""
        self._counts: Counter[tuple[str, str]] = Counter()
        """The gauge's values: runs in hand per (phase, framework)."""

    async def publish(
        self, run: JobRun, reason: str | None = None, message: str | None = None
    ) -> None:
        """The run's status; reason and message are the latest condition's unless given (or
        the latest step's that the job's kind marks with none)."""
        run.sequence += 1
        job = run.job
        condition = run.status.conditions[-1] if run.status.conditions else None
        if reason is None and run.unmarked is not None:
            reason, message = run.unmarked
        elif reason is None and condition is not None:
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
            self._topics.reports(self._config.cluster),
            job.uid,
            EventType.JOB_STATUS,
            self._config.source,
            update,
        )
        self.count(run)

    def count(self, run: JobRun) -> None:
        """Move the run to its phase in the gauge (one or two labels set, whatever the number
        of runs in hand)."""
        uid, key = run.job.uid, (run.phase.value, run.job.FRAMEWORK)
        before = self._counted.get(uid)
        if before == key:
            return
        self._counted[uid] = key
        self._add(key, 1)
        if before is not None:
            self._add(before, -1)

    def uncount(self, uid: str) -> None:
        """The job's run left the worker's hands."""
        before = self._counted.pop(uid, None)
        if before is not None:
            self._add(before, -1)

    def count_jobs(self) -> None:
        """Count the runs in hand again from scratch (after a pass that replaced many: an
        adoption, a sweep)."""
        for uid in [u for u in self._counted if u not in self._runs]:
            self.uncount(uid)
        for run in self._runs.values():
            self.count(run)

    def _add(self, key: tuple[str, str], n: int) -> None:
        self._counts[key] += n
        phase, framework = key
        self._metrics.jobs.labels(self._config.cluster, phase, framework).set(self._counts[key])
