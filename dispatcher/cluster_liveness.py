"""The clusters topic and the clusters' health: heartbeats into the registry, clusters lost
to silence or retired by an operator (their jobs moved elsewhere), and the worker process
reporting each cluster (a new one is sent its jobs' assignments again)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from datetime import UTC, datetime, timedelta

from bus.base import Record, TopicPartition
from bus.events import EventConsumer
from dispatcher.heartbeat_feed import HeartbeatFeedClock
from dispatcher.hub_context import PLACED, HubContext
from dispatcher.job_updates import RUNNING_PHASES
from dispatcher.outbox import AssignmentOutbox
from dispatcher.redispatch import Redispatcher
from schemas.cluster import ClusterSnapshot
from schemas.events import CloudEvent, ClusterRetired, EventType

log = logging.getLogger(__name__)

_TICKS_KEPT = 1000
"""Ticks waiting for the consumer to pass their ends; older ones are dropped unheard (a hub
that far behind could not hear the clusters then)."""


class ClusterLiveness:
    def __init__(
        self, context: HubContext, outbox: AssignmentOutbox, redispatch: Redispatcher
    ) -> None:
        self._context = context
        self._outbox = outbox
        self._redispatch = redispatch
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

    @property
    def lost(self) -> frozenset[str]:
        """Clusters declared lost (silent past `lost_after`) that have not reported since."""
        return frozenset(self._lost)

    def start_clock(self, interval: float) -> None:
        """Start measuring silences, once the heartbeats on the bus have been read."""
        keep = timedelta(seconds=10 * self._context.config.lost_after)
        self._feed_clock = HeartbeatFeedClock(datetime.now(UTC), interval, keep=keep)

    async def follow_feed(self, reports: EventConsumer, interval: float) -> None:
        """Tell the feed clock each time the hub has provably read every heartbeat published
        before a tick: the broker answered the reports partitions' ends at the tick, and the
        consumer's positions have passed them since (what a poll returns is handled before
        the consumer polls again, so position means handled). Judged against each tick's
        ends, not zero lag: statuses share those topics, so under load the lag is seldom
        zero although every heartbeat before the tick was read long ago. A tick the broker
        does not answer waits (retried): that stretch counts as unheard."""
        clock = self._feed_clock
        assert clock is not None
        subscription = reports.subscription
        ticks: deque[tuple[datetime, dict[TopicPartition, int]]] = deque(maxlen=_TICKS_KEPT)
        while True:
            ticks.append((datetime.now(UTC), await subscription.ends()))
            positions = await subscription.positions()
            heard = False
            while ticks and all(positions.get(tp, end) >= end for tp, end in ticks[0][1].items()):
                clock.caught_up(ticks.popleft()[0])
                heard = True
            if heard and self._newly_silent():
                self._context.wake.set()  # move its jobs now, not at the next pass
            await asyncio.sleep(interval)

    def _newly_silent(self) -> bool:
        """Whether a cluster not yet lost has now been silent past `lost_after`."""
        return any(
            s.name not in self._lost and self._silent_for(s) is not None
            for s in self._context.clusters.all()
        )

    def _silent_for(self, snapshot: ClusterSnapshot) -> float | None:
        """How long the cluster has been silent, when that is past `lost_after` (lost)."""
        assert self._feed_clock is not None
        age = self._feed_clock.silence(snapshot.observedAt)
        return age if age > self._context.config.lost_after else None

    async def check(self) -> None:
        """Mark clusters whose heartbeats stopped as lost and move their jobs elsewhere, and
        the jobs of retired clusters too."""
        context = self._context
        if self._evacuate:
            leaving, self._evacuate = self._evacuate, set()
            for record in context.ledger.in_phase(*PLACED):
                if record.cluster in leaving:
                    reason = f"cluster {record.cluster} retired by an operator"
                    await self._redispatch(record, reason, revoke=True)
        if self._feed_clock is None:
            return
        for snapshot in context.clusters.all():
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
                context.metrics.clusters_lost.inc()
                log.error(
                    "cluster lost: no heartbeat for %.0fs", age, extra={"cluster": snapshot.name}
                )
            for record in context.ledger.in_phase(*PLACED):
                if record.cluster == snapshot.name:
                    await self._redispatch(
                        record,
                        f"cluster {snapshot.name} lost (no heartbeat for {age:.0f}s)",
                        revoke=True,
                    )

    async def on_event(self, event: CloudEvent, record: Record) -> None:
        context = self._context
        if event.type == EventType.CLUSTER_RETIRED:
            retired = ClusterRetired.model_validate(event.data)
            if context.clusters.retire(retired.name) and not context.replaying:
                log.warning(
                    "cluster retired by an operator: %s",
                    retired.reason or "no reason given",
                    extra={"cluster": retired.name},
                )
            self._retired.add(retired.name)
            self._evacuate.add(retired.name)
            self._lost.discard(retired.name)
            context.wake.set()
            return
        if event.type == EventType.HUB_LEADER:
            return  # a leading hub's mark (bus/epochs.py)
        if event.type != EventType.CLUSTER_HEARTBEAT:
            raise ValueError(f"unexpected event type {event.type!r} on the clusters topic")
        snapshot = ClusterSnapshot.model_validate(event.data)
        if snapshot.observedAt is None:
            snapshot = snapshot.model_copy(update={"observedAt": event.time})
        if not context.clusters.update(snapshot, replaying=context.replaying):
            return
        if snapshot.name in self._retired:
            self._retired.discard(snapshot.name)
            self._evacuate.discard(snapshot.name)
            if not context.replaying:
                log.warning("retired cluster reports again", extra={"cluster": snapshot.name})
        context.reservations.reconcile(snapshot)
        if self._worker_restarted(snapshot):
            await self._resend_assignments(snapshot.name)
        context.wake.set()

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
            and not self._context.replaying
            and self._context.clusters.instances.conflict(snapshot.name, datetime.now(UTC)) is None
        )

    async def _resend_assignments(self, cluster: str) -> None:
        """Send a restarted worker the assignments of the jobs it should be running. It adopts
        the jobs whose pods it finds and ignores their assignments; the others' pods died with
        its predecessor (sim and local pods live in the worker), and it creates them again
        under the same names, as upstream's operator re-creates missing pods. Without this
        they stayed Running for ever."""
        context = self._context
        records = [r for r in context.ledger.in_phase(*RUNNING_PHASES) if r.cluster == cluster]
        if not records:
            return
        log.warning(
            "a new worker process reports %s: sending it the assignments of its %d jobs",
            cluster,
            len(records),
            extra={"cluster": cluster},
        )
        await context.bus.flush()  # assignments only after their Assigned statuses are durable
        for record in records:
            if record.job is not None:
                await self._outbox.assign(record)
