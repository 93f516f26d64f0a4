"""What the hub tells workers, on each cluster's assignments topic: assignments, revokes,
suspends and resumes. Assignments of a scheduling pass leave only once their Assigned
statuses are durable."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from bus.base import Bus
from bus.events import publish_payload
from dispatcher.hub_context import HubContext
from dispatcher.ledger import JobRecord
from schemas.codec import encode_payload
from schemas.events import (
    EventType,
    HubLeader,
    JobAssigned,
    JobRef,
    JobRevoked,
)
from schemas.job_parsing import runtime_of
from schemas.status import JobPhase


class AssignmentOutbox:
    def __init__(self, context: HubContext) -> None:
        self._context = context
        self._topics_made: set[str] = set()
        self._pending: list[tuple[JobRecord, str | None, int]] = []
        """Placements whose assignments wait for their Assigned statuses to be durable."""
        self._ready = asyncio.Event()

    def hold(self, placed: Iterable[JobRecord]) -> None:
        """Send these placements' assignments once their statuses are durable."""
        self._pending.extend((r, r.cluster, r.attempt) for r in placed)
        self._ready.set()

    async def run(self) -> None:
        """Assignments leave only once their Assigned statuses are durable: a hub that dies in
        between is rebuilt knowing the placement and sends it again, instead of placing the
        job a second time. The wait for that is here, apart from the scheduling loop, so the
        next pass places jobs meanwhile. A placement taken back in the meantime (deleted,
        re-dispatched) is not sent."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._pending = self._pending, []
            await self._context.bus.flush()
            for record, cluster, attempt in batch:
                if (
                    record.phase == JobPhase.ASSIGNED
                    and record.cluster == cluster
                    and record.attempt == attempt
                ):
                    await self.assign(record)

    async def assign(self, record: JobRecord) -> None:
        """Send the job's current placement to its cluster's worker."""
        assert record.job is not None and record.cluster is not None
        # The worker is told it was chosen and with what score, not how every other cluster
        # fared: the whole decision is in the Assigned status, and repeating it here cost
        # 61 KB and 1.5 ms of the hub's time per job at 1,000 clusters.
        decision = record.decision.chosen_only() if record.decision is not None else None
        assigned = JobAssigned(
            uid=record.uid,
            cluster=record.cluster,
            attempt=record.attempt,
            job=record.document(),
            runtime=runtime_of(record.job),
            placement=decision,
            conditions=record.status.conditions if record.status is not None else [],
        )
        await self._publish(record.cluster, EventType.JOB_ASSIGNED, assigned)

    async def revoke(self, record: JobRecord, reason: str) -> None:
        """Tell the job's cluster to remove what it runs of the job's current attempt."""
        assert record.cluster is not None
        revoke = JobRevoked(
            uid=record.uid, cluster=record.cluster, attempt=record.attempt, reason=reason
        )
        await self._publish(record.cluster, EventType.JOB_REVOKED, revoke)

    async def forward(self, record: JobRecord, event_type: str) -> None:
        """Pass a suspend or resume on to the worker of the job's cluster."""
        assert record.cluster is not None
        await self._publish(record.cluster, event_type, JobRef(uid=record.uid))

    async def _publish(
        self, cluster: str, event_type: str, payload: JobRef | JobRevoked | JobAssigned
    ) -> None:
        context = self._context
        topic = context.topics.assignments(cluster)
        if topic not in self._topics_made:
            await self.mark_epoch([cluster])
        await publish_payload(
            context.bus,
            topic,
            payload.uid,
            event_type,
            context.config.source,
            payload,
            wait=False,
            epoch=context.epoch,
        )

    async def mark_epoch(self, clusters: Iterable[str]) -> None:
        """Make sure these clusters' topics exist and, for a leading hub, carry its epoch
        before anything else it sends there (bus/epochs.py)."""
        context = self._context
        for cluster in clusters:
            topic = context.topics.assignments(cluster)
            if topic in self._topics_made:
                continue
            await context.bus.create_topics([context.topics.assignment_spec(cluster)])
            if context.epoch is not None:
                await mark_epoch(context.bus, topic, context.config.source, context.epoch)
            self._topics_made.add(topic)


async def mark_epoch(bus: Bus, topic: str, source: str, epoch: int) -> None:
    """The leader's mark on every partition of `topic`: a hub record of an older epoch after
    it is refused by whoever reads it."""
    headers, body = encode_payload(
        EventType.HUB_LEADER, source, "leader", HubLeader(epoch=epoch, instance=source), epoch
    )
    await bus.publish_to_every_partition(topic, body, key=b"leader", headers=tuple(headers))
