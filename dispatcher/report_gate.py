"""The clusters' reports topics as the hub reads them: the one gate to the shared truth.

Each member cluster's worker writes its jobs' statuses, its hand-backs and its heartbeats on
a topic of its own (`Topics.reports`), and under Kafka ACLs on that one alone. A record there
that speaks for another cluster is forged (or a bug): it is set aside on the dead-letter topic,
logged and counted, never believed. A status is followed only for the job's current placement
and attempt (`StatusFollower.follow_report`). What the hub accepts it passes on, under its own
epoch, to the status and clusters topics, which only hubs write: what readers trust.
"""

from __future__ import annotations

import logging

from bus.base import Record
from dispatcher.cluster_liveness import ClusterLiveness
from dispatcher.hub_context import HubContext
from dispatcher.relay import relay
from dispatcher.status_follower import StatusFollower
from schemas.events import CloudEvent, EventType, JobHandedBack, JobStatusUpdate

log = logging.getLogger(__name__)


class ForgedReport(ValueError):
    """A report on one cluster's topic about another cluster (dead-lettered: a ValueError)."""


class ReportGate:
    def __init__(
        self, context: HubContext, follower: StatusFollower, liveness: ClusterLiveness
    ) -> None:
        self._context = context
        self._follower = follower
        self._liveness = liveness

    async def on_event(self, event: CloudEvent, record: Record) -> None:
        context = self._context
        topics = context.topics
        cluster = topics.cluster_of_reports(record.topic)
        if cluster is None:
            raise ValueError(f"{record.topic} is not a cluster's reports topic")
        if event.type == EventType.CLUSTER_HEARTBEAT:
            self._check(cluster, event.data.get("name"), event, record)
            # Exported at 0 from the cluster's first heartbeat: an alert's increase() sees
            # the first forgery.
            context.metrics.forged_reports.labels(cluster=cluster)
            await self._liveness.on_event(event, record)
            await relay(context, record, topics.clusters)
        elif event.type == EventType.JOB_STATUS:
            update = event.data_as(JobStatusUpdate)
            self._check(cluster, update.cluster, event, record)
            if await self._follower.follow_report(update):
                await relay(context, record, topics.status)
        elif event.type == EventType.JOB_HANDED_BACK:
            back = event.data_as(JobHandedBack)
            self._check(cluster, back.cluster, event, record)
            if not context.replaying:
                await self._follower.on_handed_back(back)
        else:
            raise ValueError(f"unexpected event type {event.type!r} on {record.topic}")

    def _check(self, cluster: str, named: object, event: CloudEvent, record: Record) -> None:
        if named == cluster:
            return
        message = (
            f"forged report: {record.topic} (written by {cluster}'s worker alone) carries a "
            f"{event.type} for cluster {named!r} from source {event.source!r}"
        )
        if not self._context.replaying:
            self._context.metrics.forged_reports.labels(cluster=cluster).inc()
            log.error(message, extra={"cluster": cluster, "event": event.id})
        raise ForgedReport(message)
