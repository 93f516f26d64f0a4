"""The hub: validates submitted jobs, places each on one cluster, follows their status."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Sequence

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from bus.aiotasks import TaskOwner
from bus.base import Bus, BusPermissionError, Record
from bus.dead_letters import DeadLetterKey, dead_lettered_by
from bus.events import EventConsumer, EventHandler, header_is, publish_payload
from bus.topics import Topics
from dispatcher import native
from dispatcher.demand import demanded_ports, job_demand
from dispatcher.expiry import COMPLETED, Expiries
from dispatcher.fairness import IN_FLIGHT_PHASES, QueueTurns
from dispatcher.gang_fit import NodeRoom, gang_fit
from dispatcher.heartbeat_feed import HeartbeatFeedClock
from dispatcher.hub_config import HubConfig as HubConfig
from dispatcher.job_updates import RUNNING_PHASES, UPDATED, update_problem
from dispatcher.ledger import JobRecord, Ledger, queue_of
from dispatcher.metrics import HubMetrics
from dispatcher.placement import Placement, Placer, VersionedReservations
from dispatcher.port_rooms import with_port_rooms
from dispatcher.registry import ClusterRegistry
from schemas.cluster import ClusterSnapshot
from schemas.conditions import ConditionValue, set_condition
from schemas.errors import JobInvalid
from schemas.events import (
    CloudEvent,
    ClusterRetired,
    ClusterScore,
    EventType,
    JobAssigned,
    JobHandedBack,
    JobRef,
    JobRevoked,
    JobStatusUpdate,
    JobSubmitted,
    JobUpdated,
    PlacementDecision,
)
from schemas.job_parsing import job_uid_of, names_of, parse_job
from schemas.kubeflow import AnyJob
from schemas.status import (
    ALREADY_EXISTS,
    INVALID,
    TTL_EXPIRED,
    ConditionType,
    JobPhase,
    JobStatus,
)

log = logging.getLogger(__name__)

_WAITING = "WaitingForCapacity"
_WAITING_FOR_QUEUE = "WaitingForQueue"
# Phases in which a cluster is (or may soon be) running the job's pods.
_PLACED = (
    JobPhase.ASSIGNED,
    JobPhase.CREATED,
    JobPhase.RUNNING,
    JobPhase.RESTARTING,
    JobPhase.SUSPENDED,
)


class Hub:
    def __init__(
        self,
        bus: Bus,
        topics: Topics | None = None,
        config: HubConfig | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.bus = bus
        self.topics = topics or Topics()
        self.config = config or HubConfig()
        self.metrics = HubMetrics(registry or CollectorRegistry())
        self.ledger = Ledger()
        self.clusters = ClusterRegistry(self.config.max_heartbeat_age)
        self.reservations = VersionedReservations()
        self.placer = Placer(self.config.placement)
        self.turns = QueueTurns(self.config.placement.fairness())
        self._tasks = TaskOwner("hub")
        self._wake = asyncio.Event()
        self._expiries = Expiries()
        self._assignment_topics: set[str] = set()
        self._consumers: list[EventConsumer] = []
        self._replaying = False
        self._source_header = self.config.source.encode()
        self._feed_clock: HeartbeatFeedClock | None = None
        """Measures clusters' silences in time the hub could hear them (set at start)."""
        self._lost: set[str] = set()
        self._retired: set[str] = set()
        """Clusters an operator retired, until they report again."""
        self._evacuate: set[str] = set()
        """Retired clusters whose jobs the next pass moves elsewhere (also after a restart
        that replayed the retirement, whatever compaction left of their heartbeats)."""
        self._instances: dict[str, str] = {}
        """The worker process last heard reporting each cluster."""
        self._outbox: list[tuple[JobRecord, str | None, int]] = []
        """Placements whose assignments wait for their Assigned statuses to be durable."""
        self._outbox_ready = asyncio.Event()
        self.metrics.track(self)

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        await self.bus.create_topics(self.topics.shared_specs())
        group = self.topics.hub_group
        # Status and heartbeats are read whole by every hub instance (no group): together
        # they are the hub's state, so a restarted hub rebuilds it by reading them again.
        replayed_dead = await self._dead_lettered_before()
        status = self._consumer(
            [self.topics.status],
            None,
            self._on_status_event,
            skip=self._is_own_status,
            already_dead=replayed_dead,
        )
        clusters = self._consumer(
            [self.topics.clusters], None, self._on_heartbeat, already_dead=replayed_dead
        )
        jobs = self._consumer([self.topics.jobs], group, self._on_job_event, commit_behind=True)
        self._consumers = [status, clusters, jobs]
        for consumer in self._consumers:
            await consumer.subscription.start()
        await self._rebuild(status, clusters)
        replayed_dead.clear()  # what comes next is new
        interval = min(0.5, self.config.lost_after / 10)
        self._feed_clock = HeartbeatFeedClock(
            datetime.now(UTC), interval, keep=timedelta(seconds=10 * self.config.lost_after)
        )
        for consumer in self._consumers:
            self._tasks.spawn(consumer.run(), "consume")
        self._tasks.spawn(self._schedule_loop(), "schedule")
        self._tasks.spawn(self._send_assignments(), "assignments")
        self._tasks.spawn(self._follow_heartbeat_feed(clusters, interval), "heartbeat-feed")
        lag = {
            self.topics.status: status.subscription,
            self.topics.clusters: clusters.subscription,
            self.topics.jobs: jobs.subscription,
        }
        self._tasks.spawn(self.metrics.lag_sampler(lag).run(), "lag")
        log.info(
            "hub started",
            extra={
                "topic": self.topics.prefix,
                "placement": "compiled" if native.active() else "plain Python",
            },
        )

    async def _dead_lettered_before(self) -> set[DeadLetterKey]:
        """What this hub set aside before: status and heartbeats, read again from the start,
        would otherwise copy (and count, and alert on) the same bad records at every start."""
        try:
            return await dead_lettered_by(self.bus, self.topics.dead_letters, self.config.source)
        except BusPermissionError as exc:
            log.warning(
                "cannot read the dead-letter topic (%s): bad records met again while replaying "
                "status and heartbeats are set aside again; grant the hub READ on %s",
                exc,
                self.topics.dead_letters,
            )
            return set()

    async def _rebuild(self, status: EventConsumer, clusters: EventConsumer) -> None:
        self._replaying = True
        replayed = await status.catch_up()
        await clusters.catch_up()
        self._replaying = False
        self.clusters.replayed()
        if not replayed:
            return
        for record in self.ledger.all():
            self.metrics.training_operator.known(record)
        # Running ones too: their reservation ends only once a heartbeat counts their pods.
        for record in self.ledger.in_phase(
            JobPhase.ASSIGNED, JobPhase.CREATED, JobPhase.RUNNING, JobPhase.RESTARTING
        ):
            self._restore_reservation(record)
        for record in self.ledger.in_phase(JobPhase.ASSIGNED):
            # The assignment may never have reached the worker; the same attempt again is
            # harmless there (workers ignore an attempt they already run).
            await self._send_assignment(record)
        await self.bus.flush()
        log.info(
            "hub state rebuilt from %d status events: %d jobs, %d queued, %d placed",
            replayed,
            len(self.ledger.all()),
            len(self.ledger.in_phase(JobPhase.QUEUED)),
            len(self.ledger.in_phase(*_PLACED)),
        )

    def _restore_reservation(self, record: JobRecord) -> None:
        snapshot = self.clusters.get(record.cluster or "")
        if snapshot is None or record.job is None or record.uid in snapshot.jobs:
            return
        demands = job_demand(record.job)
        nodes = with_port_rooms(snapshot, sorted(demanded_ports(demands))).nodes
        fit = gang_fit([NodeRoom.of(n) for n in nodes], demands)
        if fit.fits:
            self.reservations.reserve(snapshot.name, record.uid, fit.usage)

    @property
    def lost_clusters(self) -> frozenset[str]:
        """Clusters declared lost (silent past `lost_after`) that have not reported since."""
        return frozenset(self._lost)

    @property
    def default_queue(self) -> str:
        """The queue of jobs without `schedulingPolicy.queue`, as fairness counts them."""
        return self.turns.config.default_queue

    @property
    def crashed(self) -> asyncio.Future[BaseException] | None:
        """Resolves with the exception of a background task that died."""
        return self._tasks.failed

    async def stop(self) -> None:
        await self._tasks.cancel_all()
        for consumer in self._consumers:
            await consumer.subscription.stop()
        log.info("hub stopped")

    def _consumer(
        self,
        topics: list[str],
        group: str | None,
        handler: EventHandler,
        skip: Callable[[Record], bool] | None = None,
        *,
        commit_behind: bool = False,
        already_dead: Collection[DeadLetterKey] = (),
    ) -> EventConsumer:
        return EventConsumer(
            self.bus,
            topics,
            handler,
            group=group,
            dead_letter_topic=self.topics.dead_letters,
            component=self.config.source,
            on_dead_letter=self._count_dead_letter,
            skip=skip,
            commit_behind=commit_behind,
            already_dead=already_dead,
        )

    def _is_own_status(self, record: Record) -> bool:
        """This hub's own statuses, once live: already applied when they were published, so
        reading them back (half of the status topic's traffic) is skipped undecoded."""
        return not self._replaying and header_is(record, "ce_source", self._source_header)

    async def _count_dead_letter(self, record: Record, reason: str) -> None:
        self.metrics.dead_letters.labels(component="hub").inc()

    # -- jobs topic ---------------------------------------------------------------------

    async def _on_job_event(self, event: CloudEvent, record: Record) -> None:
        if event.type == EventType.JOB_SUBMITTED:
            await self._on_submitted(event)
        elif event.type == EventType.JOB_UPDATED:
            await self._on_updated(event)
        elif event.type == EventType.JOB_DELETED:
            await self._on_deleted(event.data_as(JobRef))
        elif event.type == EventType.JOB_SUSPENDED:
            await self._on_suspended(event.data_as(JobRef))
        elif event.type == EventType.JOB_RESUMED:
            await self._on_resumed(event.data_as(JobRef))
        else:
            raise ValueError(f"unexpected event type {event.type!r} on the jobs topic")

    async def _on_submitted(self, event: CloudEvent) -> None:
        document = event.data_as(JobSubmitted).job
        try:
            job = parse_job(document)
        except JobInvalid as exc:
            uid = job_uid_of(document)
            known = self.ledger.get(uid) if uid is not None else None
            if known is not None and known.phase != JobPhase.DELETED:
                # A job of that name exists: this submission is refused and the job left as
                # it is (a Rejected status under its uid would end it for every reader).
                await self._publish_status(
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
                await self._publish_status(record, reason=INVALID, message=str(exc))
            log.warning("rejected invalid job: %s", exc, extra={"job": uid, "event": event.id})
            raise
        known = self.ledger.get(job.uid)
        if (
            known is not None
            and known.managed_by is not None
            and known.phase != JobPhase.DELETED
            and known.managed_by != (job.run_policy.managedBy or "")
        ):
            problem = (
                f"runPolicy.managedBy is immutable: job {job.key} is managed by "
                f"{known.managed_by or '(unset)'}, the resubmission says "
                f"{job.run_policy.managedBy or '(unset)'}"
            )
            # Refused as a duplicate is, so that its producer hears why; the event goes to
            # the dead-letter topic too.
            await self._publish_status(
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
            await self._publish_status(
                known,
                reason=ALREADY_EXISTS,
                message=f"job {job.key} already exists ({known.phase.value}); "
                "delete it to run it again",
                submission=event.id,
            )
            return
        # A new run of a deleted job keeps counting attempts, so that no worker mistakes its
        # assignment for a redelivery of the old run's.
        await self._admit(
            job,
            event.id,
            previous_attempts=known.attempt if known else 0,
            submitted_at=event.time.timestamp(),
        )

    async def _admit(
        self,
        job: AnyJob,
        submission: str,
        previous_attempts: int = 0,
        submitted_at: float = 0.0,
    ) -> None:
        if not job.run_policy.managed_by_trainhub:
            manager = job.run_policy.managedBy or "kubeflow.org/training-operator (unset)"
            record = JobRecord.of(job, JobPhase.SKIPPED)
            record.submission = submission
            self.ledger.put(record)
            await self._publish_status(
                record,
                reason="ManagedElsewhere",
                message=f"runPolicy.managedBy is {manager}; trainhub leaves this job alone",
            )
            return
        problem = self.placer.problem(job)
        if problem is not None:
            # Malformed constraints (nodeAffinity, cluster-selector annotations, no replica at
            # all): invalid whatever the clusters, so said at once, as a schema error is.
            rejected = JobRecord.of(job, JobPhase.REJECTED)
            rejected.submission = submission
            await self._publish_status(rejected, reason=INVALID, message=problem)
            log.warning("rejected invalid job: %s", problem, extra={"job": job.uid})
            raise JobInvalid(f"{job.kind}: {problem}")
        held = bool(job.run_policy.suspend)
        record = JobRecord.of(job, JobPhase.SUSPENDED if held else JobPhase.QUEUED)
        record.submission = submission
        record.submitted_at = submitted_at
        record.attempt = previous_attempts
        _note(record, ConditionType.CREATED, "Created")
        if held:
            _note(record, ConditionType.SUSPENDED, "Suspended")
        self.ledger.put(record)
        self.metrics.training_operator.created(record)
        await self._publish_status(
            record,
            reason="Suspended" if held else "Queued",
            message="runPolicy.suspend is true: held until resumed"
            if held
            else "waiting for placement",
            with_job=True,
        )
        self._wake.set()

    async def _on_updated(self, event: CloudEvent) -> None:
        """A job's new spec (dispatcher/job_updates.py): one whose pods exist may only be
        suspended or resumed; otherwise the spec is replaced, and a job suspended in its
        cluster is taken back, to be placed again with it when resumed. A refused update is
        dead-lettered with the reason and the job left as it was."""
        job = parse_job(event.data_as(JobUpdated).job)
        record = self.ledger.get(job.uid)
        problem = update_problem(
            record.job if record else None, record.phase if record else None, job
        ) or self.placer.problem(job)
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
            await self._revoke(record, "job updated while suspended; placed again on resume")
            self.reservations.release(record.uid)
            record.cluster, record.sequence = None, 0
        record.job = job
        record.queue = queue_of(job)
        message = "spec updated"
        if hold is False and record.phase == JobPhase.SUSPENDED:
            record.phase = JobPhase.QUEUED
            record.queued_at = time.monotonic()
            _note(record, ConditionType.SUSPENDED, "Resumed", "False")
            message = "spec updated and resumed: waiting for placement"
        elif hold and record.phase == JobPhase.QUEUED:
            record.phase = JobPhase.SUSPENDED
            _note(record, ConditionType.SUSPENDED, "Suspended")
            message = "spec updated; runPolicy.suspend is true: held until resumed"
        elif record.phase == JobPhase.SUSPENDED:
            message = "spec updated; held until resumed"
        await self._publish_status(record, reason=UPDATED, message=message, with_job=True)
        self._wake.set()

    async def _on_deleted(self, ref: JobRef) -> None:
        record = self.ledger.get(ref.uid)
        if record is None or record.phase == JobPhase.DELETED:
            return
        await self._delete(record, "job deleted by its owner", "job deleted")

    async def _delete(
        self, record: JobRecord, why: str, message: str, reason: str = "Deleted"
    ) -> None:
        if record.cluster:
            # Finished jobs too: their pods may still be there (cleanPodPolicy None).
            await self._revoke(record, why)
        self.reservations.release(record.uid)
        record.phase = JobPhase.DELETED
        self.metrics.training_operator.deleted(record)
        await self._publish_status(record, reason=reason, message=message)
        self._wake.set()

    async def _delete_expired(self) -> None:
        """Delete the completed jobs whose ttlSecondsAfterFinished ran out."""
        for expiry in self._expiries.due(time.time()):
            record = self.ledger.get(expiry.uid)
            if record is None or not self._expiries.still_applies(expiry, record):
                continue
            log.info("deleted after ttlSecondsAfterFinished", extra={"job": record.uid})
            message = f"deleted ttlSecondsAfterFinished ({expiry.ttl}s) after it finished"
            await self._delete(record, "ttlSecondsAfterFinished ran out", message, TTL_EXPIRED)

    async def _on_suspended(self, ref: JobRef) -> None:
        record = self.ledger.get(ref.uid)
        if record is None or record.phase.finished or record.phase == JobPhase.SUSPENDED:
            return
        if record.phase == JobPhase.QUEUED:
            # Not placed yet: the hub holds it; nothing runs anywhere.
            record.phase = JobPhase.SUSPENDED
            _note(record, ConditionType.SUSPENDED, "Suspended")
            await self._publish_status(record, reason="Suspended", message="held until resumed")
            return
        await self._forward(record, EventType.JOB_SUSPENDED)

    async def _on_resumed(self, ref: JobRef) -> None:
        record = self.ledger.get(ref.uid)
        if record is None or record.job is None or record.phase.finished:
            return
        if record.phase == JobPhase.SUSPENDED and record.cluster is None:
            document = record.job.to_document()
            document["spec"].setdefault("runPolicy", {})["suspend"] = False
            record.job = parse_job(document)
            record.phase = JobPhase.QUEUED
            record.queued_at = time.monotonic()
            _note(record, ConditionType.SUSPENDED, "Resumed", "False")
            await self._publish_status(
                record, reason="Resumed", message="waiting for placement", with_job=True
            )
            self._wake.set()
            return
        if record.cluster is not None:
            await self._forward(record, EventType.JOB_RESUMED)

    async def _forward(self, record: JobRecord, event_type: str) -> None:
        """Pass a suspend or resume on to the worker of the job's cluster."""
        assert record.cluster is not None
        await self._publish_assignment(record.cluster, event_type, JobRef(uid=record.uid))

    async def _revoke(self, record: JobRecord, reason: str) -> None:
        assert record.cluster is not None
        revoke = JobRevoked(
            uid=record.uid, cluster=record.cluster, attempt=record.attempt, reason=reason
        )
        await self._publish_assignment(record.cluster, EventType.JOB_REVOKED, revoke)

    # -- status topic ---------------------------------------------------------------------

    async def _on_status_event(self, event: CloudEvent, record: Record) -> None:
        if event.type == EventType.JOB_HANDED_BACK:
            if not self._replaying:
                await self._on_handed_back(event.data_as(JobHandedBack))
            return
        if event.type != EventType.JOB_STATUS:
            return
        update = event.data_as(JobStatusUpdate)
        if event.source == self.config.source:
            if self._replaying:
                self._replay_own(update, event.time.timestamp())
            return
        self._apply_worker_status(update)

    def _replay_own(self, update: JobStatusUpdate, published_at: float) -> None:
        """Re-apply a decision this hub (or its predecessor) published."""
        if update.reason in (ALREADY_EXISTS, INVALID):
            # An answer to a refused submission: a duplicate changes nothing about the job,
            # and an invalid job never existed (live, it is not kept either).
            return
        record = self.ledger.get(update.uid)
        if update.job is not None:
            try:
                job = parse_job(update.job)
            except JobInvalid:
                return
            same_run = record is not None and record.submission == update.submission
            # The run's first status (Queued) stands for its submission time.
            submitted_at = record.submitted_at if same_run and record else published_at
            record = JobRecord.of(job, update.phase)
            record.submitted_at = submitted_at
            self.ledger.put(record)
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
            self.ledger.put(record)
        if update.reason == REDISPATCHED and record.cluster is not None:
            # Taken from that cluster (lost, or handed back): avoided as it was live.
            self._exclude(record, record.cluster, published_at)
        record.phase = update.phase
        record.cluster, record.attempt = update.cluster, update.attempt
        record.reason, record.message = update.reason, update.message
        record.submission = update.submission or record.submission
        if update.placement is not None:
            record.decision = update.placement
        if update.status is not None:
            record.status = update.status
        if update.phase == JobPhase.ASSIGNED:
            record.sequence = 0

    def _apply_worker_status(self, update: JobStatusUpdate) -> None:
        job = self.ledger.get(update.uid)
        if job is None:
            log.warning("status for an unknown job ignored", extra={"job": update.uid})
            return
        if update.cluster != job.cluster or update.attempt != job.attempt:
            log.warning(
                "status from a revoked placement ignored (%s attempt %s; current %s attempt %s)",
                update.cluster,
                update.attempt,
                job.cluster,
                job.attempt,
                extra={"job": update.uid, "cluster": update.cluster},
            )
            return
        if update.sequence <= job.sequence or job.phase.finished:
            return
        job.sequence = update.sequence
        if not self._replaying:
            self.metrics.training_operator.phase_changed(job, update.phase)
        job.phase = update.phase
        job.status = update.status
        job.reason, job.message = update.reason, update.message
        if job.phase in COMPLETED:
            completed = update.status.completionTime if update.status else None
            self._expiries.add(job, completed or datetime.now(UTC))
        if job.phase.finished or job.phase == JobPhase.SUSPENDED:
            # Its pods are gone or terminal. A Running job keeps its reservation until a
            # heartbeat counts its pods (`reconcile`): Running can arrive first, and releasing
            # then would offer the same capacity twice until that heartbeat.
            self.reservations.release(job.uid)
        if job.phase.finished:
            self._wake.set()

    async def _on_handed_back(self, back: JobHandedBack) -> None:
        record = self.ledger.get(back.uid)
        if record is None or record.cluster != back.cluster or record.attempt != back.attempt:
            log.warning(
                "hand-back for a placement that is not current ignored",
                extra={"job": back.uid, "cluster": back.cluster},
            )
            return
        if record.phase.finished:
            return
        await self._redispatch(
            record, f"handed back by {back.cluster}: {back.reason}", revoke=False
        )

    async def _redispatch(self, record: JobRecord, reason: str, *, revoke: bool) -> None:
        """Take the job away from its cluster and queue it again, avoiding that cluster."""
        assert record.cluster is not None
        if revoke:
            await self._revoke(record, reason)
        self.reservations.release(record.uid)
        self._exclude(record, record.cluster, time.time())
        record.cluster = None
        record.phase = JobPhase.QUEUED
        record.queued_at = time.monotonic()
        record.sequence = 0
        # The lost run's conditions are not this one's: it starts over as created.
        record.status = None
        _note(record, ConditionType.CREATED, "Created")
        self.metrics.redispatches.inc()
        log.warning("re-dispatching: %s", reason, extra={"job": record.uid})
        await self._publish_status(record, reason=REDISPATCHED, message=reason)
        self._wake.set()

    def _exclude(self, record: JobRecord, cluster: str, since: float) -> None:
        """Keep the job off `cluster` for `exclusion_seconds` from `since` (seconds since the
        epoch: a restarted hub counts from its predecessor's re-dispatch, not from now)."""
        left = self.config.exclusion_seconds - (time.time() - since)
        if left > 0:
            record.excluded[cluster] = time.monotonic() + left

    async def _follow_heartbeat_feed(self, clusters: EventConsumer, interval: float) -> None:
        """Tell the feed clock each time the hub has provably read every heartbeat on the
        bus: the broker answered that nothing published before the check is left after the
        consumer's position (and what a poll returns is handled before the consumer yields,
        so position means handled). A check the broker does not answer waits (retried)."""
        assert self._feed_clock is not None
        while True:
            checked_at = datetime.now(UTC)
            if await clusters.subscription.lag() == 0:
                self._feed_clock.caught_up(checked_at)
                if self._newly_silent():
                    self._wake.set()  # move its jobs now, not at the next pass
            await asyncio.sleep(interval)

    def _newly_silent(self) -> bool:
        """Whether a cluster not yet lost has now been silent past `lost_after`."""
        return any(
            s.name not in self._lost and self._silent_for(s) is not None
            for s in self.clusters.all()
        )

    def _silent_for(self, snapshot: ClusterSnapshot) -> float | None:
        """How long the cluster has been silent, when that is past `lost_after` (lost)."""
        assert self._feed_clock is not None
        age = self._feed_clock.silence(snapshot.observedAt)
        return age if age > self.config.lost_after else None

    async def _check_clusters(self) -> None:
        """Mark clusters whose heartbeats stopped as lost and move their jobs elsewhere, and
        the jobs of retired clusters too."""
        if self._evacuate:
            leaving, self._evacuate = self._evacuate, set()
            for record in self.ledger.in_phase(*_PLACED):
                if record.cluster in leaving:
                    reason = f"cluster {record.cluster} retired by an operator"
                    await self._redispatch(record, reason, revoke=True)
        if self._feed_clock is None:
            return
        for snapshot in self.clusters.all():
            age = self._silent_for(snapshot)
            if age is None:
                if snapshot.name in self._lost:
                    self._lost.discard(snapshot.name)
                    log.warning("cluster is back", extra={"cluster": snapshot.name})
                continue
            if snapshot.name in self._lost:
                continue
            self._lost.add(snapshot.name)
            if self._feed_clock.predates_start(snapshot.observedAt):
                # Silent since before this hub started: a previous hub may have declared it
                # lost already; counted again at every restart, it would alert every time.
                log.error(
                    "cluster lost: no heartbeat since before this hub started (%.0fs ago)",
                    snapshot.age_seconds(),
                    extra={"cluster": snapshot.name},
                )
            else:
                self.metrics.clusters_lost.inc()
                log.error(
                    "cluster lost: no heartbeat for %.0fs", age, extra={"cluster": snapshot.name}
                )
            for record in self.ledger.in_phase(*_PLACED):
                if record.cluster == snapshot.name:
                    await self._redispatch(
                        record,
                        f"cluster {snapshot.name} lost (no heartbeat for {age:.0f}s)",
                        revoke=True,
                    )

    # -- clusters topic -------------------------------------------------------------------

    async def _on_heartbeat(self, event: CloudEvent, record: Record) -> None:
        if event.type == EventType.CLUSTER_RETIRED:
            retired = ClusterRetired.model_validate(event.data)
            if self.clusters.retire(retired.name) and not self._replaying:
                log.warning(
                    "cluster retired by an operator: %s",
                    retired.reason or "no reason given",
                    extra={"cluster": retired.name},
                )
            self._retired.add(retired.name)
            self._evacuate.add(retired.name)
            self._lost.discard(retired.name)
            self._wake.set()
            return
        if event.type != EventType.CLUSTER_HEARTBEAT:
            raise ValueError(f"unexpected event type {event.type!r} on the clusters topic")
        snapshot = ClusterSnapshot.model_validate(event.data)
        if snapshot.observedAt is None:
            snapshot = snapshot.model_copy(update={"observedAt": event.time})
        if not self.clusters.update(snapshot, replaying=self._replaying):
            return
        if snapshot.name in self._retired:
            self._retired.discard(snapshot.name)
            self._evacuate.discard(snapshot.name)
            if not self._replaying:
                log.warning("retired cluster reports again", extra={"cluster": snapshot.name})
        self.reservations.reconcile(snapshot)
        if self._worker_restarted(snapshot):
            await self._resend_assignments(snapshot.name)
        self._wake.set()

    def _worker_restarted(self, snapshot: ClusterSnapshot) -> bool:
        """A new worker process reports the cluster (not two taking turns: see
        dispatcher/worker_instances.py)."""
        if snapshot.instance is None:
            return False
        before = self._instances.get(snapshot.name)
        self._instances[snapshot.name] = snapshot.instance
        return (
            before is not None
            and before != snapshot.instance
            and not self._replaying
            and self.clusters.instances.conflict(snapshot.name, datetime.now(UTC)) is None
        )

    async def _resend_assignments(self, cluster: str) -> None:
        """Send a restarted worker the assignments of the jobs it should be running. It adopts
        the jobs whose pods it finds and ignores their assignments; the others' pods died with
        its predecessor (sim and local pods live in the worker), and it creates them again
        under the same names, as upstream's operator re-creates missing pods. Without this
        they stayed Running for ever."""
        records = [r for r in self.ledger.in_phase(*RUNNING_PHASES) if r.cluster == cluster]
        if not records:
            return
        log.warning(
            "a new worker process reports %s: sending it the assignments of its %d jobs",
            cluster,
            len(records),
            extra={"cluster": cluster},
        )
        await self.bus.flush()  # assignments only after their Assigned statuses are durable
        for record in records:
            if record.job is not None:
                await self._send_assignment(record)

    # -- placement ------------------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.config.schedule_interval):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            await self._check_clusters()
            await self._delete_expired()
            self.ledger.compact_finished()
            placed = await self.schedule_pending()
            if placed:
                self._outbox.extend((r, r.cluster, r.attempt) for r in placed)
                self._outbox_ready.set()

    async def _send_assignments(self) -> None:
        """Assignments leave only once their Assigned statuses are durable: a hub that dies in
        between is rebuilt knowing the placement and sends it again, instead of placing the
        job a second time. The wait for that is here, apart from the scheduling loop, so the
        next pass places jobs meanwhile. A placement taken back in the meantime (deleted,
        re-dispatched) is not sent."""
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            batch, self._outbox = self._outbox, []
            await self.bus.flush()
            for record, cluster, attempt in batch:
                if (
                    record.phase == JobPhase.ASSIGNED
                    and record.cluster == cluster
                    and record.attempt == attempt
                ):
                    await self._send_assignment(record)

    def plan(self, job: AnyJob, excluded: frozenset[str] = frozenset()) -> Placement:
        return self.placer.plan(
            job,
            self.clusters.all(),
            reservations=self.reservations,
            max_heartbeat_age=self.config.max_heartbeat_age,
            excluded=excluded,
        )

    async def schedule_pending(self) -> list[JobRecord]:
        """One scheduling pass; returns the jobs it placed (their assignments are not sent
        yet: see `_send_assignments`).

        A pass only ever takes capacity, so once a job found no room, a later job of the same
        shape avoiding the same clusters finds none either: it gets that decision without
        being planned again, and a backlog of look-alike jobs costs a pass one plan per shape.
        (Capacity freed while the pass awaits its sends wakes another pass.)
        """
        queued = self.ledger.in_phase(JobPhase.QUEUED)
        placed: list[JobRecord] = []
        # Decisions that found no room this pass, by shape, with their reasons.
        unplaced: dict[tuple[object, frozenset[str]], tuple[Placement, str]] = {}
        in_flight = (
            self.ledger.in_phase(*IN_FLIGHT_PHASES) if self.turns.config.limits_queues else ()
        )
        for record, held in self.turns.order(queued, in_flight):
            assert record.job is not None
            if held is not None:
                await self._note_waiting(record, held, _WAITING_FOR_QUEUE)
                continue
            excluded = record.avoided()
            shape = (self.placer.shape_key(record.job), excluded)
            found = unplaced.get(shape)
            if found is None:
                placement = self.plan(record.job, excluded)
                if placement.chosen is not None:
                    record.decision = placement.decision
                    await self._assign(record, placement)
                    self.turns.placed(record)
                    placed.append(record)
                    continue
                found = unplaced[shape] = (placement, _reasons(placement.decision.clusters))
            placement, reasons = found
            record.decision = placement.decision
            if placement.never_fits:
                record.phase = JobPhase.REJECTED
                self.metrics.decisions.labels(outcome="rejected").inc()
                await self._publish_status(
                    record,
                    reason="Unschedulable",
                    message=f"the job fits no registered cluster: {reasons}",
                )
            else:
                await self._note_waiting(record, reasons, _WAITING)
        # The queued jobs now, not those the pass began with: a job admitted while the pass
        # awaited its sends was read on admission, and dropping that would read it again.
        self.placer.retain(
            r.job for r in self.ledger.in_phase(JobPhase.QUEUED) if r.job is not None
        )
        return placed

    async def _note_waiting(self, record: JobRecord, reasons: str, why: str) -> None:
        """The first reason a job waits goes out at once; a changed one only once the last
        has stood for `waiting_status_interval` (passes run at least every second, so the
        newest reason is published at most that interval plus a pass late). `why`: waiting
        for capacity, or for its queue's turn (whose counts move with every pass too)."""
        reasons = reasons or "no cluster has reported capacity yet"
        if reasons == record.message:
            return
        now = time.monotonic()
        if (
            record.reason == why
            and now - record.waiting_noted_at < self.config.waiting_status_interval
        ):
            return
        record.waiting_noted_at = now
        await self._publish_status(record, reason=why, message=reasons)

    async def _assign(self, record: JobRecord, placement: Placement) -> None:
        assert record.job is not None and placement.chosen is not None
        record.attempt += 1
        record.cluster = placement.chosen
        record.phase = JobPhase.ASSIGNED
        record.sequence = 0
        self.reservations.reserve(placement.chosen, record.uid, placement.usage)
        # The assignment itself leaves after the pass, once this status is durable.
        await self._publish_status(
            record, reason="Assigned", message=f"placed on {placement.chosen}"
        )
        self.metrics.placement_latency.observe(time.monotonic() - record.queued_at)
        chosen_score = next(
            c.score for c in placement.decision.clusters if c.name == placement.chosen
        )
        self.metrics.placement_score.observe(chosen_score or 0.0)
        self.metrics.decisions.labels(outcome="assigned").inc()
        log.info(
            "placed on %s (score %s)",
            placement.chosen,
            chosen_score,
            extra={"job": record.uid, "cluster": placement.chosen},
        )

    async def _send_assignment(self, record: JobRecord) -> None:
        assert record.job is not None and record.cluster is not None
        decision = record.decision
        if decision is not None:
            # The worker is told it was chosen and with what score, not how every other
            # cluster fared: the whole decision is in the Assigned status, and repeating it
            # here cost 61 KB and 1.5 ms of the hub's time per job at 1,000 clusters.
            decision = PlacementDecision.model_construct(
                chosen=decision.chosen,
                clusters=[c for c in decision.clusters if c.name == decision.chosen],
            )
        assigned = JobAssigned(
            uid=record.uid,
            cluster=record.cluster,
            attempt=record.attempt,
            job=record.document(),
            placement=decision,
            conditions=record.status.conditions if record.status is not None else [],
        )
        await self._publish_assignment(record.cluster, EventType.JOB_ASSIGNED, assigned)

    async def _publish_assignment(
        self, cluster: str, event_type: str, payload: JobRef | JobRevoked | JobAssigned
    ) -> None:
        topic = self.topics.assignments(cluster)
        if topic not in self._assignment_topics:
            await self.bus.create_topics([self.topics.assignment_spec(cluster)])
            self._assignment_topics.add(topic)
        await publish_payload(
            self.bus, topic, payload.uid, event_type, self.config.source, payload, wait=False
        )

    # -- status out -----------------------------------------------------------------------

    async def _publish_status(
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
        update = JobStatusUpdate(
            uid=record.uid,
            name=record.name,
            namespace=record.namespace,
            kind=record.kind,
            framework=record.framework,
            # The queue the hub counts the job in, its default when the job names none.
            queue=record.queue or self.default_queue,
            phase=record.phase,
            cluster=record.cluster,
            attempt=record.attempt,
            reason=reason,
            message=message,
            status=record.status if record.phase in _HUB_OWNED else None,
            placement=record.decision,
            submission=submission or record.submission,
            job=record.document() if with_job and record.job is not None else None,
        )
        await publish_payload(
            self.bus,
            self.topics.status,
            record.uid,
            EventType.JOB_STATUS,
            self.config.source,
            update,
            wait=False,
        )


REDISPATCHED = "Redispatched"
"""The reason of the status that takes a job from its cluster (lost, or handed back)."""
_HUB_OWNED = frozenset({JobPhase.QUEUED, JobPhase.SUSPENDED, JobPhase.ASSIGNED})
"""Phases whose job conditions the hub keeps: no worker runs the job (yet); a Suspended
status from the hub is for a job it holds."""


def _note(
    record: JobRecord, ctype: ConditionType, reason: str, value: ConditionValue = "True"
) -> None:
    """A condition of a job no worker runs, as upstream's operator sets it on the job object
    (`Created`; `Suspended`, False once `Resumed`), so that clients waiting for one see it."""
    kind, name = record.kind or "Job", record.name or record.uid
    if record.status is None:
        record.status = JobStatus()
    message = f"{kind} {name} is {reason.lower()}."
    set_condition(record.status, ctype, f"{kind}{reason}", message, value=value)


_MESSAGE_CLUSTERS = 10
"""How many clusters' reasons a status message names: the placement decision in the same
status has every one, and at 1,000 clusters a message naming all would be some 60 KB, sent
again whenever any of them changed and kept in the job's summary for good."""


def _reasons(scores: Sequence[ClusterScore]) -> str:
    """The rejected clusters' reasons for a status message (the first few, by name)."""
    rejected = [c for c in scores if not c.feasible]
    shown = "; ".join(f"{c.name}: {c.reason}" for c in rejected[:_MESSAGE_CLUSTERS])
    if len(rejected) > _MESSAGE_CLUSTERS:
        shown += (
            f"; and {len(rejected) - _MESSAGE_CLUSTERS} more clusters "
            "(the placement decision has every reason)"
        )
    return shown
