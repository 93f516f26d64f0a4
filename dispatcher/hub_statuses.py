"""The hub's statuses on the status topic: one per decision it takes about a job."""

from __future__ import annotations

from bus.events import publish_payload
from dispatcher.hub_context import HubContext
from dispatcher.ledger import JobRecord
from schemas.events import EventType, JobStatusUpdate
from schemas.job_parsing import runtime_of
from schemas.status import JobPhase

HUB_OWNED = frozenset({JobPhase.QUEUED, JobPhase.SUSPENDED, JobPhase.ASSIGNED})
"""Phases whose job conditions the hub keeps: no worker runs the job (yet); a Suspended
status from the hub is for a job it holds."""


class HubStatuses:
    def __init__(self, context: HubContext) -> None:
        self._context = context

    async def publish(
        self,
        record: JobRecord,
        *,
        reason: str,
        message: str,
        with_job: bool = False,
        submission: str | None = None,
    ) -> None:
        """Publish the record's state; `submission` answers a different submission (a
        refused duplicate) without changing the record."""
        if submission is None:
            record.reason, record.message = reason, message
        context = self._context
        fairness = context.turns.config
        update = JobStatusUpdate(
            uid=record.uid,
            name=record.name,
            namespace=record.namespace,
            kind=record.kind,
            framework=record.framework,
            # The queue the hub counts the job in, its default when the job names none.
            queue=record.queue or context.default_queue,
            priority_class=fairness.class_of(record),
            priority=fairness.known_priority(record),
            phase=record.phase,
            cluster=record.cluster,
            attempt=record.attempt,
            reason=reason,
            message=message,
            status=record.status if record.phase in HUB_OWNED else None,
            placement=record.decision,
            submission=submission or record.submission,
            job=record.document() if with_job and record.job is not None else None,
            runtime=runtime_of(record.job) if with_job and record.job is not None else None,
        )
        await publish_payload(
            context.bus,
            context.topics.status,
            record.uid,
            EventType.JOB_STATUS,
            context.config.source,
            update,
            wait=False,
            epoch=context.epoch,
        )
        if submission is None and context.ledger.get(record.uid) is record:
            # A job the hub holds (not a refused submission's answer): its new state.
            await context.state.save(record)
