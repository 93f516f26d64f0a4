"""The hub: validates submitted jobs, places each on one cluster, follows their status.

`Hub` is wiring and lifecycle. The work is done in rooms of its own, which share a
`HubContext` (dispatcher/hub_context.py):
- `JobIntake` (intake.py): the jobs topic: submit, update, delete, suspend, resume, TTL.
- `ReportGate` (report_gate.py): each cluster's reports topic, which its worker alone
  writes; what it accepts goes on to the status and clusters topics, which only hubs write.
- `StatusFollower` (status_follower.py): workers' statuses and hand-backs; the hub's own
  statuses while it rebuilds.
- `ClusterLiveness` (cluster_liveness.py): heartbeats, lost and retired clusters, worker
  instances.
- `SchedulingPass` (scheduling_pass.py): one pass over the queued jobs.
- `AssignmentOutbox` (outbox.py) and `HubStatuses` (hub_statuses.py): what the hub says, to
  workers and to everyone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable

from prometheus_client import CollectorRegistry

from bus.aiotasks import TaskOwner
from bus.base import Bus, BusPermissionError, Record
from bus.dead_letters import DeadLetterKey, dead_lettered_by
from bus.epochs import EpochFence
from bus.events import EventConsumer, EventHandler
from bus.topics import Topics
from dispatcher import native
from dispatcher.cluster_liveness import ClusterLiveness
from dispatcher.demand import demanded_ports, job_demand
from dispatcher.fairness import QueueTurns
from dispatcher.gang_fit import NodeRoom, gang_fit
from dispatcher.hub_config import HubConfig as HubConfig
from dispatcher.hub_context import PLACED, HubContext
from dispatcher.hub_statuses import HubStatuses
from dispatcher.intake import JobIntake
from dispatcher.ledger import JobRecord, Ledger
from dispatcher.metrics import HubMetrics
from dispatcher.outbox import AssignmentOutbox, mark_epoch
from dispatcher.placement import Placement, Placer, VersionedReservations
from dispatcher.port_rooms import with_port_rooms
from dispatcher.redispatch import REDISPATCHED as REDISPATCHED
from dispatcher.redispatch import Redispatcher
from dispatcher.registry import ClusterRegistry
from dispatcher.relay import relayed_by
from dispatcher.report_gate import ReportGate
from dispatcher.runtime_follower import RuntimeFollower
from dispatcher.scheduling_pass import SchedulingPass
from dispatcher.state_store import HubStateStore
from dispatcher.status_follower import StatusFollower
from schemas.kubeflow import AnyJob
from schemas.status import JobPhase

log = logging.getLogger(__name__)

_GROUP_SESSION_TIMEOUT = 6.0
"""Seconds after which the partitions of a hub that stopped answering go to the next one."""
_ASSIGNMENT_WAIT = 30.0


class Hub:
    def __init__(
        self,
        bus: Bus,
        topics: Topics | None = None,
        config: HubConfig | None = None,
        registry: CollectorRegistry | None = None,
        *,
        epoch: int | None = None,
    ) -> None:
        """`epoch`: the leading hub's (dispatcher/leadership.py); None for a hub that runs
        alone."""
        config = config or HubConfig()
        self.context = HubContext(
            bus=bus,
            topics=topics or Topics(),
            config=config,
            metrics=HubMetrics(registry or CollectorRegistry()),
            ledger=Ledger(),
            clusters=ClusterRegistry(config.max_heartbeat_age),
            reservations=VersionedReservations(),
            placer=Placer(config.placement),
            turns=QueueTurns(config.placement.fairness()),
            state=HubStateStore(bus, (topics or Topics()).hub_state),
            runtimes=RuntimeFollower(
                bus,
                topics or Topics(),
                component=config.source,
                on_dead_letter=self._count_dead_letter,
            ),
            epoch=epoch,
        )
        self.statuses = HubStatuses(self.context)
        self.outbox = AssignmentOutbox(self.context)
        redispatch = Redispatcher(self.context, self.statuses, self.outbox)
        self.intake = JobIntake(self.context, self.statuses, self.outbox)
        self.follower = StatusFollower(self.context, redispatch)
        self.liveness = ClusterLiveness(self.context, self.outbox, redispatch)
        self.gate = ReportGate(self.context, self.follower, self.liveness)
        self.scheduling = SchedulingPass(self.context, self.statuses, lambda: self.liveness.lost)
        # What the rest of the house reads of the hub (metrics, the embedded runner, tests):
        # the shared parts themselves, never replaced.
        self.bus, self.topics, self.config = bus, self.context.topics, config
        self.metrics, self.ledger = self.context.metrics, self.context.ledger
        self.clusters, self.reservations = self.context.clusters, self.context.reservations
        self.placer, self.turns = self.context.placer, self.context.turns
        self.rebuilt_from = (0, 0)
        """What the last start read: (job states, status events)."""
        self._marked_status = False
        self._tasks = TaskOwner("hub")
        self._consumers: list[EventConsumer] = []
        self.metrics.track(self)

    @property
    def lost_clusters(self) -> frozenset[str]:
        """Clusters declared lost (silent past `lost_after`) that have not reported since."""
        return self.liveness.lost

    @property
    def default_queue(self) -> str:
        """The queue of jobs without `schedulingPolicy.queue`, as fairness counts them."""
        return self.context.default_queue

    @property
    def crashed(self) -> asyncio.Future[BaseException] | None:
        """Resolves with the exception of a background task that died."""
        return self._tasks.failed

    def plan(self, job: AnyJob, excluded: frozenset[str] = frozenset()) -> Placement:
        return self.scheduling.plan(job, excluded)

    async def schedule_pending(self) -> list[JobRecord]:
        """One scheduling pass (`SchedulingPass.run`)."""
        return await self.scheduling.run()

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        context = self.context
        topics = context.topics
        await context.bus.create_topics(topics.shared_specs())
        # The hub's state is on its state topic (one record per job); the status topic and
        # the clusters' reports are read in groups, from the predecessor's last commit, and
        # the heartbeats it passed on whole (the compacted topic holds the newest of each).
        replayed_dead = await self._dead_lettered_before()
        # Every runtime operators applied, before any job is judged or rebuilt.
        await context.runtimes.start(replayed_dead)
        status = self._consumer(
            [topics.status],
            topics.hub_status_group,
            self.follower.on_event,
            skip=self.follower.is_own_status,
            already_dead=replayed_dead,
        )
        clusters = self._consumer(
            [topics.clusters],
            None,
            self.liveness.on_event,
            skip=self._own_relay,
            already_dead=replayed_dead,
            fence=EpochFence(),
        )
        reports = self._consumer(
            [],
            topics.hub_reports_group,
            self.gate.on_event,
            already_dead=replayed_dead,
            prefix=topics.reports_prefix,
        )
        jobs = self._consumer(
            [topics.jobs], topics.hub_group, self.intake.on_event, commit_behind=True
        )
        self._consumers = [status, clusters, reports, jobs]
        for consumer in self._consumers:
            await consumer.subscription.start()
        await self._rebuild(status, clusters, reports)
        replayed_dead.clear()  # what comes next is new
        interval = min(0.5, context.config.lost_after / 10)
        self.liveness.start_clock(interval)
        for consumer in self._consumers:
            self._tasks.spawn(consumer.run(), "consume")
        self._tasks.spawn(self._schedule_loop(), "schedule")
        self._tasks.spawn(context.runtimes.run(), "runtimes")
        self._tasks.spawn(self.outbox.run(), "assignments")
        feed = self.liveness.follow_feed(reports, interval)
        self._tasks.spawn(feed, "heartbeat-feed")
        lag = {
            topics.status: status.subscription,
            topics.clusters: clusters.subscription,
            f"{topics.reports_prefix}*": reports.subscription,
            topics.jobs: jobs.subscription,
        }
        self._tasks.spawn(context.metrics.lag_sampler(lag).run(), "lag")
        log.info(
            "hub started",
            extra={
                "topic": topics.prefix,
                "placement": "compiled" if native.active() else "plain Python",
            },
        )

    async def stop(self) -> None:
        await self._tasks.cancel_all()
        for consumer in self._consumers:
            await consumer.subscription.stop()
        await self.context.runtimes.stop()
        log.info("hub stopped")

    async def _schedule_loop(self) -> None:
        context = self.context
        while True:
            try:
                async with asyncio.timeout(context.config.schedule_interval):
                    await context.wake.wait()
            except TimeoutError:
                pass
            context.wake.clear()
            await self.liveness.check()
            await self.intake.delete_expired()
            context.ledger.compact_finished(context.config.finished_retention)
            for forgotten in context.ledger.forget_expired():
                await context.state.forget(forgotten.uid)
            placed = await self.scheduling.run()
            if placed:
                self.outbox.hold(placed)

    # -- rebuilding from the topics -----------------------------------------------------

    async def _dead_lettered_before(self) -> set[DeadLetterKey]:
        """What this hub set aside before: status and heartbeats, read again from the start,
        would otherwise copy (and count, and alert on) the same bad records at every start."""
        context = self.context
        try:
            return await dead_lettered_by(
                context.bus, context.topics.dead_letters, context.config.source
            )
        except BusPermissionError as exc:
            log.warning(
                "cannot read the dead-letter topic (%s): bad records met again while replaying "
                "status and heartbeats are set aside again; grant the hub READ on %s",
                exc,
                context.topics.dead_letters,
            )
            return set()

    async def _rebuild(
        self, status: EventConsumer, clusters: EventConsumer, reports: EventConsumer
    ) -> None:
        """The heartbeats, then the state topic, then the statuses since the predecessor's
        last commit (all of them for a hub whose deployment predates the state topic), then
        the clusters' reports since its last commit. A leader marks the topics it writes
        with its epoch as soon as it knows the clusters, before reading the rest: a former
        leader continued meanwhile is refused from then."""
        context = self.context
        ledger = context.ledger
        context.replaying = True
        await clusters.catch_up()
        if context.epoch is not None:
            await self._mark_epoch(c.name for c in context.clusters.all())
        loaded = await context.state.load(context.runtimes.catalog)
        for record, ttl in loaded:
            ledger.put(record)
            if record.phase.finished and record.status is not None:
                completed = record.status.completionTime
                if completed is not None:
                    context.expiries.add(record, completed, ttl)
        context.replaying = True
        # Its partitions first: a group member holding none reads nothing (a predecessor
        # that died holds them until its session times out).
        replayed = 0
        async with asyncio.timeout(_ASSIGNMENT_WAIT):
            while not status.subscription.assignment():
                replayed += await status.poll_once(timeout=0.5)
        replayed += await status.catch_up()
        async with asyncio.timeout(_ASSIGNMENT_WAIT):
            while await reports.subscription.unassigned():
                replayed += await reports.poll_once(timeout=0.5)
        replayed += await reports.catch_up()
        context.replaying = False
        context.clusters.replayed()
        self.rebuilt_from = (len(loaded), replayed)
        if context.epoch is not None:
            # Clusters holding jobs that sent no heartbeat the compacted topic kept.
            await self._mark_epoch(r.cluster for r in ledger.in_phase(*PLACED) if r.cluster)
        if not (loaded or replayed):
            return
        for record in ledger.all():
            context.metrics.training_operator.known(record)
        # Running ones too: their reservation ends only once a heartbeat counts their pods.
        for record in ledger.in_phase(
            JobPhase.ASSIGNED, JobPhase.CREATED, JobPhase.RUNNING, JobPhase.RESTARTING
        ):
            self._restore_reservation(record)
        for record in ledger.in_phase(JobPhase.ASSIGNED):
            # The assignment may never have reached the worker; the same attempt again is
            # harmless there (workers ignore an attempt they already run).
            await self.outbox.assign(record)
        await context.bus.flush()
        log.info(
            "hub state rebuilt from %d job states and %d status events: %d jobs, %d queued, "
            "%d placed",
            len(loaded),
            replayed,
            len(ledger.all()),
            len(ledger.in_phase(JobPhase.QUEUED)),
            len(ledger.in_phase(*PLACED)),
        )

    async def _mark_epoch(self, clusters: Iterable[str]) -> None:
        context = self.context
        assert context.epoch is not None
        if not self._marked_status:
            for topic in (context.topics.status, context.topics.clusters):
                await mark_epoch(context.bus, topic, context.config.source, context.epoch)
            self._marked_status = True
        await self.outbox.mark_epoch(sorted(set(clusters)))

    def _restore_reservation(self, record: JobRecord) -> None:
        snapshot = self.context.clusters.get(record.cluster or "")
        if snapshot is None or record.job is None or record.uid in snapshot.jobs:
            return
        demands = job_demand(record.job)
        nodes = with_port_rooms(snapshot, sorted(demanded_ports(demands))).nodes
        fit = gang_fit([NodeRoom.of(n) for n in nodes], demands)
        if fit.fits:
            self.context.reservations.reserve(snapshot.name, record.uid, fit.usage)

    def _own_relay(self, record: Record) -> bool:
        """A heartbeat this hub passed on, read back live (applied when it was accepted)."""
        context = self.context
        return not context.replaying and relayed_by(record, context.config.source.encode())

    def _consumer(
        self,
        topics: list[str],
        group: str | None,
        handler: EventHandler,
        skip: Callable[[Record], bool] | None = None,
        *,
        commit_behind: bool = False,
        already_dead: Collection[DeadLetterKey] = (),
        fence: EpochFence | None = None,
        prefix: str | None = None,
    ) -> EventConsumer:
        context = self.context
        return EventConsumer(
            context.bus,
            topics,
            handler,
            group=group,
            dead_letter_topic=context.topics.dead_letters,
            component=context.config.source,
            on_dead_letter=self._count_dead_letter,
            skip=skip,
            commit_behind=commit_behind,
            already_dead=already_dead,
            fence=fence,
            prefix=prefix,
            # A hub that took over from one that died gets its partitions this soon.
            session_timeout=_GROUP_SESSION_TIMEOUT,
        )

    async def _count_dead_letter(self, record: Record, reason: str) -> None:
        self.context.metrics.dead_letters.labels(component="hub").inc()
