"""One scheduling pass: the queued jobs in their queues' turns, each placed on the best
cluster that holds its whole gang, told to wait (with the reasons), or rejected when no
registered cluster could ever hold it, or when every one that could has been unavailable
(its worker stopped, restarting or silent) for `unavailable_cluster_wait`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from dispatcher.fairness import IN_FLIGHT_PHASES
from dispatcher.hub_context import HubContext
from dispatcher.hub_statuses import HubStatuses
from dispatcher.ledger import JobRecord
from dispatcher.placement import Placement
from schemas.cluster import ClusterSnapshot
from schemas.kubeflow import AnyJob
from schemas.status import INVALID, JobPhase

log = logging.getLogger(__name__)

WAITING = "WaitingForCapacity"
WAITING_FOR_QUEUE = "WaitingForQueue"
WAITING_FOR_CLUSTER = "WaitingForCluster"
"""Every cluster that could hold the job is unavailable now: it waits for one to be back."""


class SchedulingPass:
    def __init__(
        self,
        context: HubContext,
        statuses: HubStatuses,
        lost: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        self._context = context
        self._statuses = statuses
        self._lost = lost
        """The clusters declared lost (`ClusterLiveness.lost`: silence the hub could hear,
        not a bus outage of its own)."""
        self._stranded: dict[str, float] = {}
        """Queued jobs every cluster that could hold is unavailable to, since when
        (monotonic, as this hub saw it)."""

    def plan(self, job: AnyJob, excluded: frozenset[str] = frozenset()) -> Placement:
        context = self._context
        return context.placer.plan(
            job,
            context.clusters.all(),
            reservations=context.reservations,
            max_heartbeat_age=context.config.max_heartbeat_age,
            excluded=excluded,
        )

    async def run(self) -> list[JobRecord]:
        """One scheduling pass; returns the jobs it placed (their assignments are not sent
        yet: see `AssignmentOutbox`).

        A pass only ever takes capacity, so once a job found no room, a later job of the same
        shape avoiding the same clusters finds none either: it gets that decision without
        being planned again, and a backlog of look-alike jobs costs a pass one plan per shape.
        (Capacity freed while the pass awaits its sends wakes another pass.)
        """
        context = self._context
        ledger, placer, turns = context.ledger, context.placer, context.turns
        queued = ledger.in_phase(JobPhase.QUEUED)
        placed: list[JobRecord] = []
        # Decisions that found no room this pass, by shape, with their reasons and the
        # unavailable clusters the job waits for (when no other could ever hold it).
        unplaced: dict[tuple[object, frozenset[str]], tuple[Placement, str, str]] = {}
        in_flight = ledger.in_phase(*IN_FLIGHT_PHASES) if turns.config.limits_queues else ()
        for record, held in turns.order(queued, in_flight):
            assert record.job is not None
            unknown = self._unknown_priority(record)
            if unknown is not None:
                self._stranded.pop(record.uid, None)
                await self._reject(record, unknown, reason=INVALID)
                continue
            if held is not None:
                await self.note_waiting(record, held, WAITING_FOR_QUEUE)
                continue
            excluded = record.avoided()
            shape = (placer.shape_key(record.job), excluded)
            found = unplaced.get(shape)
            if found is None:
                placement = self.plan(record.job, excluded)
                if placement.chosen is not None:
                    self._stranded.pop(record.uid, None)
                    record.decision = placement.decision
                    await self._assign(record, placement)
                    turns.placed(record)
                    placed.append(record)
                    continue
                found = unplaced[shape] = (
                    placement,
                    _reasons(placement),
                    self._unavailable(placement),
                )
            placement, reasons, unavailable = found
            record.decision = placement.decision
            if placement.never_fits:
                self._stranded.pop(record.uid, None)
                await self._reject(record, f"the job fits no registered cluster: {reasons}")
            elif unavailable:
                await self._wait_for_cluster(record, unavailable)
            else:
                self._stranded.pop(record.uid, None)
                await self.note_waiting(record, reasons, WAITING)
        # The queued jobs now, not those the pass began with: a job admitted while the pass
        # awaited its sends was read on admission, and dropping that would read it again.
        still = ledger.in_phase(JobPhase.QUEUED)
        placer.retain(r.job for r in still if r.job is not None)
        if self._stranded:
            waiting = {r.uid for r in still}
            self._stranded = {u: t for u, t in self._stranded.items() if u in waiting}
        return placed

    def _unavailable(self, placement: Placement) -> str:
        """When every cluster that could ever hold the job is unavailable (unhealthy, as
        a stopped worker reports, or lost): those clusters and why, else "". Worded to stay
        the same from pass to pass (a changed message is a status)."""
        clusters, lost = self._context.clusters, self._lost()
        # A placement that chose nothing holds every cluster's verdict.
        possible = [clusters.get(v.name) for v in placement.verdicts if not v.never]
        why = [_unavailability(s, lost) for s in possible]
        if not why or any(w is None for w in why):
            return ""
        return "; ".join(f"{s.name}: {w}" for s, w in zip(possible, why, strict=True) if s)

    async def _wait_for_cluster(self, record: JobRecord, unavailable: str) -> None:
        """Wait for an unavailable cluster to be back, up to `unavailable_cluster_wait`."""
        limit = self._context.config.unavailable_cluster_wait
        since = self._stranded.setdefault(record.uid, time.monotonic())
        if time.monotonic() - since >= limit:
            del self._stranded[record.uid]
            await self._reject(
                record,
                f"every cluster that could hold the job stayed unavailable for {limit:.0f}s "
                f"(unavailable_cluster_wait): {unavailable}",
            )
            return
        await self.note_waiting(
            record,
            f"every cluster that could hold the job is unavailable ({unavailable}): waiting "
            f"for one to be back, at most {limit:.0f}s (unavailable_cluster_wait)",
            WAITING_FOR_CLUSTER,
        )

    def _unknown_priority(self, record: JobRecord) -> str | None:
        """Why the job's priorityClass is refused: the hub names its classes and this is
        none of them (read as the default, it would run at a priority no one chose). With
        no classes configured, every job has the default and none is refused."""
        known = self._context.turns.config.priority_classes
        policy = record.job.run_policy.schedulingPolicy if record.job is not None else None
        name = policy.priorityClass if policy is not None else None
        if not known or name is None or name in known:
            return None
        listed = ", ".join(f"{n} ({v})" for n, v in sorted(known.items(), key=lambda c: -c[1]))
        return (
            f"spec.runPolicy.schedulingPolicy.priorityClass: unknown class {name!r}; "
            f"the hub knows {listed}"
        )

    async def _reject(self, record: JobRecord, message: str, reason: str = "Unschedulable") -> None:
        record.reject()
        self._context.metrics.decisions.labels(outcome="rejected").inc()
        await self._statuses.publish(record, reason=reason, message=message)

    async def note_waiting(self, record: JobRecord, reasons: str, why: str) -> None:
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
            and now - record.waiting_noted_at < self._context.config.waiting_status_interval
        ):
            return
        record.waiting_noted_at = now
        await self._statuses.publish(record, reason=why, message=reasons)

    async def _assign(self, record: JobRecord, placement: Placement) -> None:
        assert record.job is not None and placement.chosen is not None
        context = self._context
        record.assign(placement.chosen)
        context.reservations.reserve(placement.chosen, record.uid, placement.usage)
        # The assignment itself leaves after the pass, once this status is durable.
        await self._statuses.publish(
            record, reason="Assigned", message=f"placed on {placement.chosen}"
        )
        context.metrics.placement_latency.observe(time.monotonic() - record.queued_at)
        chosen_score = next(
            c.score for c in placement.decision.clusters if c.name == placement.chosen
        )
        context.metrics.placement_score.observe(chosen_score or 0.0)
        context.metrics.decisions.labels(outcome="assigned").inc()
        log.info(
            "placed on %s (score %s)",
            placement.chosen,
            chosen_score,
            extra={"job": record.uid, "cluster": placement.chosen},
        )


def _unavailability(snapshot: ClusterSnapshot | None, lost: frozenset[str]) -> str | None:
    """Why the cluster cannot take jobs now though it may later; None when it may now (a
    stale heartbeat not yet lost is a wait like a full cluster's)."""
    if snapshot is None:
        return "not registered"
    if not snapshot.healthy:
        return snapshot.unhealthyReason or "cluster reports unhealthy"
    if snapshot.name in lost:
        observed = snapshot.observedAt
        since = f" since {observed:%Y-%m-%dT%H:%M:%SZ}" if observed is not None else ""
        return f"lost: no heartbeat{since}"
    return None


def _reasons(placement: Placement) -> str:
    """Why a job that went nowhere did, for a status message: the rejected clusters counted
    by kind of reason, then the first few by name with their reasons in full (those its
    decision lists: at 1,000 clusters a message naming all would be some 60 KB, sent again
    whenever any of them changed and kept in the job's summary for good)."""
    decision = placement.decision
    rejected = [c for c in decision.clusters if not c.feasible]
    if not rejected:
        return ""
    considered, feasible, _ = decision.counts()
    shown = "; ".join(f"{c.name}: {c.reason}" for c in rejected)
    more = considered - feasible - len(rejected)
    if more > 0:
        shown += f"; and {more} more clusters"
    return f"{decision.summary()} ({shown})"
