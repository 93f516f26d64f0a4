"""Workers' statuses and hand-backs as the hub follows them: from the clusters' reports
topics live (through `ReportGate`, dispatcher/report_gate.py), and from the status topic
while a starting hub rebuilds (its own earlier decisions and the statuses it relayed)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from bus.base import Record
from bus.events import header_is
from dispatcher.expiry import COMPLETED
from dispatcher.hub_context import HubContext
from dispatcher.ledger import JobRecord
from dispatcher.redispatch import REDISPATCHED, Redispatcher
from dispatcher.relay import relayed_by
from schemas.errors import JobInvalid
from schemas.events import CloudEvent, EventType, JobHandedBack, JobStatusUpdate
from schemas.job_parsing import parse_job, parse_placed_job
from schemas.status import ALREADY_EXISTS, INVALID, JobPhase

log = logging.getLogger(__name__)


class StatusFollower:
    def __init__(self, context: HubContext, redispatch: Redispatcher) -> None:
        self._context = context
        self._redispatch = redispatch
        self._source_header = context.config.source.encode()
        self._unrelayed_sources: set[str] = set()

    def is_own_status(self, record: Record) -> bool:
        """What this hub wrote on the status topic (its decisions, the statuses it relayed),
        once live: applied already, so reading it back is skipped undecoded."""
        return not self._context.replaying and (
            header_is(record, "ce_source", self._source_header)
            or relayed_by(record, self._source_header)
        )

    async def on_event(self, event: CloudEvent, record: Record) -> None:
        """The status topic: only hubs write it (a worker reports on its own topic)."""
        if event.type != EventType.JOB_STATUS:
            return
        update = event.data_as(JobStatusUpdate)
        if event.source == self._context.config.source:
            if self._context.replaying:
                # Published by a predecessor after its last commit: its state may predate it.
                record_of = self._replay_own(update, event.time.timestamp())
                if record_of is not None:
                    await self._context.state.save(record_of)
            return
        if not self._context.replaying and not relayed_by(record, self._source_header):
            self._unrelayed(event.source)
            return
        # A worker's status a hub accepted and passed on (read while rebuilding).
        await self.follow_report(update)

    def _unrelayed(self, source: str) -> None:
        if source not in self._unrelayed_sources:
            self._unrelayed_sources.add(source)
            log.warning(
                "statuses written to the status topic by %s ignored: workers report on their "
                "cluster's reports topic, and only hubs write the status topic (is that "
                "worker older than this hub?)",
                source,
            )

    async def follow_report(self, update: JobStatusUpdate) -> bool:
        """Follow a worker's status; returns whether it is one to pass on to readers: of the
        job's current placement and attempt, and new (or read again while rebuilding, when
        the predecessor may have died before passing it on)."""
        context = self._context
        job = self._current(update)
        if job is None:
            return False
        if self._apply_worker_status(update, job):
            await context.state.save(job)
            return True
        return context.replaying

    def _replay_own(self, update: JobStatusUpdate, published_at: float) -> JobRecord | None:
        """Re-apply a decision this hub (or its predecessor) published; returns the record
        it changed."""
        if update.reason in (ALREADY_EXISTS, INVALID):
            # An answer to a refused submission: a duplicate changes nothing about the job,
            # and an invalid job never existed (live, it is not kept either).
            return None
        ledger = self._context.ledger
        record = ledger.get(update.uid)
        if update.job is not None:
            try:
                job = (
                    parse_placed_job(update.job, update.runtime)
                    if update.runtime is not None
                    else parse_job(update.job, self._context.runtimes.catalog)
                )
            except JobInvalid:
                return None
            same_run = record is not None and record.submission == update.submission
            # The run's first status (Queued) stands for its submission time.
            submitted_at = record.submitted_at if same_run and record else published_at
            record = JobRecord.of(job, update.phase)
            record.submitted_at = submitted_at
            ledger.put(record)
        elif record is None:
            record = JobRecord(
                uid=update.uid,
                phase=update.phase,
                name=update.name,
                namespace=update.namespace,
                kind=update.kind,
                framework=update.framework,
                queue=update.queue,
            )
            ledger.put(record)
        if update.reason == REDISPATCHED and record.cluster is not None:
            # Taken from that cluster (lost, or handed back): avoided as it was live.
            record.exclude(record.cluster, published_at, self._context.config.exclusion_seconds)
        record.replay(update)
        return record

    def _current(self, update: JobStatusUpdate) -> JobRecord | None:
        """The job's record, if the status is of its current placement and attempt."""
        job = self._context.ledger.get(update.uid)
        if job is None:
            log.warning("status for an unknown job ignored", extra={"job": update.uid})
            return None
        if update.cluster != job.cluster or update.attempt != job.attempt:
            log.warning(
                "status from a revoked placement ignored (%s attempt %s; current %s attempt %s)",
                update.cluster,
                update.attempt,
                job.cluster,
                job.attempt,
                extra={"job": update.uid, "cluster": update.cluster},
            )
            return None
        return job

    def _apply_worker_status(self, update: JobStatusUpdate, job: JobRecord) -> bool:
        """Follow a worker's status of the job's current attempt; returns whether it changed
        the job's record."""
        context = self._context
        if update.sequence <= job.sequence or job.phase.finished:
            return False
        if not context.replaying:
            context.metrics.training_operator.phase_changed(job, update.phase)
        job.follow(update)
        if job.phase in COMPLETED:
            completed = update.status.completionTime if update.status else None
            context.expiries.add(job, completed or datetime.now(UTC))
        if job.phase.finished or job.phase == JobPhase.SUSPENDED:
            # Its pods are gone or terminal. A Running job keeps its reservation until a
            # heartbeat counts its pods (`reconcile`): Running can arrive first, and releasing
            # then would offer the same capacity twice until that heartbeat.
            context.reservations.release(job.uid)
        if job.phase.finished:
            context.wake.set()
        return True

    async def on_handed_back(self, back: JobHandedBack) -> None:
        record = self._context.ledger.get(back.uid)
        if record is None or record.cluster != back.cluster or record.attempt != back.attempt:
            log.warning(
                "hand-back for a placement that is not current ignored",
                extra={"job": back.uid, "cluster": back.cluster},
            )
            return
        if record.phase.finished:
            return
        await self._redispatch(
            record,
            f"handed back by {back.cluster}: {back.reason}",
            revoke=False,
            avoid=not back.stopping,
        )
