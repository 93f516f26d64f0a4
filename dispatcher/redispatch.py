"""Taking a job from its cluster (lost, retired, handed back) and queueing it again."""

from __future__ import annotations

import logging

from dispatcher.hub_context import HubContext
from dispatcher.hub_statuses import HubStatuses
from dispatcher.ledger import JobRecord
from dispatcher.outbox import AssignmentOutbox

log = logging.getLogger(__name__)

REDISPATCHED = "Redispatched"
"""The reason of the status that takes a job from its cluster (lost, or handed back)."""


class Redispatcher:
    def __init__(
        self, context: HubContext, statuses: HubStatuses, outbox: AssignmentOutbox
    ) -> None:
        self._context = context
        self._statuses = statuses
        self._outbox = outbox

    async def __call__(
        self, record: JobRecord, reason: str, *, revoke: bool, avoid: bool = True
    ) -> None:
        """Queue the job again, avoiding its cluster for `exclusion_seconds` (unless not
        `avoid`: its worker stopped, the cluster did not fail it); `revoke` tells that
        cluster's worker to remove what is left of it."""
        context = self._context
        if revoke:
            await self._outbox.revoke(record, reason)
        context.reservations.release(record.uid)
        record.requeue(context.config.exclusion_seconds if avoid else 0.0)
        context.metrics.redispatches.inc()
        log.warning("re-dispatching: %s", reason, extra={"job": record.uid})
        await self._statuses.publish(record, reason=REDISPATCHED, message=reason)
        context.wake.set()
