"""The jobs topic: submissions, updates, deletes, suspends and resumes, each turned into a
change of the job's record and the status that announces it."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from bus.base import Record
from dispatcher.hub_context import HubContext
from dispatcher.hub_statuses import HubStatuses
from dispatcher.job_updates import UPDATED, update_problem
from dispatcher.ledger import JobRecord, queue_of
from dispatcher.outbox import AssignmentOutbox
from schemas.conditions import JobStep
from schemas.errors import JobInvalid
from schemas.events import CloudEvent, EventType, JobRef, JobSubmitted, JobUpdated
from schemas.job_controls import control_field, with_suspend
from schemas.job_parsing import job_uid_of, names_of, parse_job, parse_placed_job, runtime_of
from schemas.kubeflow import AnyJob
from schemas.status import ALREADY_EXISTS, INVALID, TTL_EXPIRED, JobPhase
from schemas.trainer_runtimes import RuntimeCatalog, pinned_catalog
from schemas.trainjob import TrainJob

log = logging.getLogger(__name__)


class JobIntake:
    def __init__(
        self, context: HubContext, statuses: HubStatuses, outbox: AssignmentOutbox
    ) -> None:
        self._context = context
        self._statuses = statuses
        self._outbox = outbox

    async def on_event(self, event: CloudEvent, record: Record) -> None:
        if event.type == EventType.JOB_SUBMITTED:
            await self._on_submitted(event)
        elif event.type == EventType.JOB_UPDATED:
            await self._on_updated(event)
        elif event.type in _REQUESTS:
            ref = event.data_as(JobRef)
            self._check_known(ref, event)
            await _REQUESTS[event.type][0](self, ref)
        else:
            log.warning(
                "unknown event type %r on the jobs topic", event.type, extra={"event": event.id}
            )
            raise ValueError(
                f"unknown event type {event.type!r} on the jobs topic (it takes "
                f"{', '.join([EventType.JOB_SUBMITTED, EventType.JOB_UPDATED, *_REQUESTS])})"
            )

    def _check_known(self, ref: JobRef, event: CloudEvent) -> None:
        """A request for a job the hub never heard of (a wrong uid, one derived from another
        namespace, or a request that overtook its submission on another key) is refused:
        dead-lettered with the reason, so its producer can find out why nothing happened."""
        if self._context.ledger.get(ref.uid) is not None:
            return
        action = _REQUESTS[event.type][1]
        log.warning(
            "%s request for an unknown job", action, extra={"job": ref.uid, "event": event.id}
        )
        raise ValueError(
            f"no job with uid {ref.uid!r}: the hub holds no such job to {action} (a job's uid "
            "is its metadata.uid, or the UUID v5 of '<namespace>/<name>': docs/events.md)"
        )

    async def _on_submitted(self, event: CloudEvent) -> None:
        ledger = self._context.ledger
        document = event.data_as(JobSubmitted).job
        runtimes = self._context.runtimes
        await runtimes.known(document)
        try:
            job = parse_job(document, runtimes.catalog)
        except JobInvalid as exc:
            uid = job_uid_of(document)
            known = ledger.get(uid) if uid is not None else None
            if known is not None and known.phase != JobPhase.DELETED:
                # A job of that name exists: this submission is refused and the job left as
                # it is (a Rejected status under its uid would end it for every reader).
                await self._statuses.publish(
                    known,
                    reason=ALREADY_EXISTS,
                    message=f"job {known.namespace or 'default'}/{known.name or known.uid} "
                    "already exists "
                    f"({known.phase.value}); this submission is also invalid: {exc}",
                    submission=event.id,
                )
            elif uid is not None:
                record = JobRecord(uid=uid, phase=JobPhase.REJECTED, **names_of(document))
                record.submission = event.id  # a producer that waits for its run sees the end
                await self._statuses.publish(record, reason=INVALID, message=str(exc))
            log.warning("rejected invalid job: %s", exc, extra={"job": uid, "event": event.id})
            raise
        known = ledger.get(job.uid)
        if (
            known is not None
            and known.managed_by is not None
            and known.phase != JobPhase.DELETED
            and known.managed_by != (job.run_policy.managedBy or "")
        ):
            problem = (
                f"{control_field(job.kind, 'managedBy')} is immutable: job {job.key} is managed by "
                f"{known.managed_by or '(unset)'}, the resubmission says "
                f"{job.run_policy.managedBy or '(unset)'}"
            )
            # Refused as a duplicate is, so that its producer hears why; the event goes to
            # the dead-letter topic too.
            await self._statuses.publish(
                known,
                reason=ALREADY_EXISTS,
                message=f"job {job.key} already exists ({known.phase.value}); {problem}",
                submission=event.id,
            )
            raise ValueError(problem)
        if known is not None and known.submission == event.id:
            return  # the same submission delivered again
        if known is not None and known.phase != JobPhase.DELETED:
            log.info(
                "duplicate submission refused (job is %s)",
                known.phase,
                extra={"job": job.uid, "event": event.id},
            )
            await self._statuses.publish(
                known,
                reason=ALREADY_EXISTS,
                message=f"job {job.key} already exists ({known.phase.value}); "
                "delete it to run it again",
                submission=event.id,
            )
            return
        # A new run of a deleted job keeps counting attempts, so that no worker mistakes its
        # assignment for a redelivery of the old run's.
        await self.admit(
            job,
            event.id,
            previous_attempts=known.attempt if known else 0,
            submitted_at=event.time.timestamp(),
        )

    async def admit(
        self,
        job: AnyJob,
        submission: str,
        previous_attempts: int = 0,
        submitted_at: float = 0.0,
    ) -> None:
        """Record a valid new job: queued (or held, when it asks to start suspended), or
        skipped when another controller manages it."""
        context = self._context
        if not job.run_policy.managed_by_trainhub:
            manager = job.run_policy.managedBy or "kubeflow.org/training-operator (unset)"
            record = JobRecord.of(job, JobPhase.SKIPPED)
            record.submission = submission
            context.ledger.put(record)
            await self._statuses.publish(
                record,
                reason="ManagedElsewhere",
                message=f"{control_field(job.kind, 'managedBy')} is {manager}; "
                "trainhub leaves this job alone",
            )
            return
        problem = context.placer.problem(job)
        if problem is not None:
            # Malformed constraints (nodeAffinity, cluster-selector annotations, no replica at
            # all): invalid whatever the clusters, so said at once, as a schema error is.
            rejected = JobRecord.of(job, JobPhase.REJECTED)
            rejected.submission = submission
            await self._statuses.publish(rejected, reason=INVALID, message=problem)
            log.warning("rejected invalid job: %s", problem, extra={"job": job.uid})
            raise JobInvalid(f"{job.kind}: {problem}")
        held = bool(job.run_policy.suspend)
        record = JobRecord.of(job, JobPhase.SUSPENDED if held else JobPhase.QUEUED)
        record.submission = submission
        record.submitted_at = submitted_at
        record.attempt = previous_attempts
        record.note(JobStep.CREATED)
        if held:
            record.note(JobStep.SUSPENDED)
        context.ledger.put(record)
        context.metrics.training_operator.created(record)
        await self._statuses.publish(
            record,
            reason="Suspended" if held else "Queued",
            message=f"{control_field(job.kind, 'suspend')} is true: held until resumed"
            if held
            else "waiting for placement",
            with_job=True,
        )
        context.wake.set()

    async def _on_updated(self, event: CloudEvent) -> None:
        """A job's new spec (dispatcher/job_updates.py): one whose pods exist may only be
        suspended or resumed; otherwise the spec is replaced, and a job suspended in its
        cluster is taken back, to be placed again with it when resumed. A refused update is
        dead-lettered with the reason and the job left as it was."""
        context = self._context
        document = event.data_as(JobUpdated).job
        await context.runtimes.known(document)
        job = parse_job(document, self._update_catalog(document))
        record = context.ledger.get(job.uid)
        problem = update_problem(
            record.job if record else None,
            record.phase if record else None,
            job,
            record.status if record else None,
        ) or context.placer.problem(job)
        if problem is not None:
            log.warning("update refused: %s", problem, extra={"job": job.uid, "event": event.id})
            raise ValueError(f"update refused: {problem}")
        assert record is not None
        hold = job.run_policy.suspend
        if record.phase != JobPhase.SUSPENDED and record.cluster is not None:
            if hold:  # the one change allowed while its pods exist
                await self._on_suspended(JobRef(uid=job.uid))
            return
        if record.cluster is not None:  # suspended in its cluster: its pods are gone
            await self._outbox.revoke(record, "job updated while suspended; placed again on resume")
            context.reservations.release(record.uid)
            record.unplace()
        record.job = job
        record.queue = queue_of(job)
        message = "spec updated"
        if hold is False and record.phase == JobPhase.SUSPENDED:
            record.resume()
            message = "spec updated and resumed: waiting for placement"
        elif hold and record.phase == JobPhase.QUEUED:
            record.hold()
            message = (
                f"spec updated; {control_field(job.kind, 'suspend')} is true: held until resumed"
            )
        elif record.phase == JobPhase.SUSPENDED:
            message = "spec updated; held until resumed"
        await self._statuses.publish(record, reason=UPDATED, message=message, with_job=True)
        context.wake.set()

    def _update_catalog(self, document: object) -> RuntimeCatalog:
        """Where an update finds its runtime: a TrainJob's own, the one it was resolved
        against when submitted (a runtime changed since does not change a job), over the
        hub's runtimes (a changed runtimeRef is then refused as such)."""
        catalog = self._context.runtimes.catalog
        uid = job_uid_of(document)
        record = self._context.ledger.get(uid) if uid is not None else None
        if record is None or not isinstance(record.job, TrainJob):
            return catalog
        return pinned_catalog(record.job.runtime, base=lambda: catalog)

    async def _on_deleted(self, ref: JobRef) -> None:
        record = self._context.ledger.get(ref.uid)
        if record is None or record.phase == JobPhase.DELETED:
            return
        await self._delete(record, "job deleted by its owner", "job deleted")

    async def _delete(
        self, record: JobRecord, why: str, message: str, reason: str = "Deleted"
    ) -> None:
        context = self._context
        if record.cluster:
            # Finished jobs too: their pods may still be there (cleanPodPolicy None).
            await self._outbox.revoke(record, why)
        context.reservations.release(record.uid)
        record.delete()
        context.metrics.training_operator.deleted(record)
        await self._statuses.publish(record, reason=reason, message=message)
        context.wake.set()

    async def delete_expired(self) -> None:
        """Delete the completed jobs whose ttlSecondsAfterFinished ran out."""
        expiries = self._context.expiries
        for expiry in expiries.due(time.time()):
            record = self._context.ledger.get(expiry.uid)
            if record is None or not expiries.still_applies(expiry, record):
                continue
            log.info("deleted after ttlSecondsAfterFinished", extra={"job": record.uid})
            message = f"deleted ttlSecondsAfterFinished ({expiry.ttl}s) after it finished"
            await self._delete(record, "ttlSecondsAfterFinished ran out", message, TTL_EXPIRED)

    async def _on_suspended(self, ref: JobRef) -> None:
        record = self._context.ledger.get(ref.uid)
        if record is None or record.phase.finished or record.phase == JobPhase.SUSPENDED:
            return
        if record.phase == JobPhase.QUEUED:
            # Not placed yet: the hub holds it; nothing runs anywhere.
            record.hold()
            await self._statuses.publish(record, reason="Suspended", message="held until resumed")
            return
        await self._outbox.forward(record, EventType.JOB_SUSPENDED)

    async def _on_resumed(self, ref: JobRef) -> None:
        record = self._context.ledger.get(ref.uid)
        if record is None or record.job is None or record.phase.finished:
            return
        if record.phase == JobPhase.SUSPENDED and record.cluster is None:
            record.job = parse_placed_job(
                with_suspend(record.job.to_document(), False), runtime_of(record.job)
            )
            record.resume()
            await self._statuses.publish(
                record, reason="Resumed", message="waiting for placement", with_job=True
            )
            self._context.wake.set()
            return
        if record.cluster is not None:
            await self._outbox.forward(record, EventType.JOB_RESUMED)


_REQUESTS: dict[str, tuple[Callable[[JobIntake, JobRef], Awaitable[None]], str]] = {
    EventType.JOB_DELETED: (JobIntake._on_deleted, "delete"),
    EventType.JOB_SUSPENDED: (JobIntake._on_suspended, "suspend"),
    EventType.JOB_RESUMED: (JobIntake._on_resumed, "resume"),
}
"""The requests on the jobs topic that name a job by uid (`JobRef`)."""
