"""Topic names and their settings; a prefix lets several deployments share one broker."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bus.base import TopicSpec

_WEEK_MS = 7 * 24 * 3600 * 1000
_DAY_MS = 24 * 3600 * 1000
_HOUR_MS = 3600 * 1000
_STATE_COMPACTION = {
    "delete.retention.ms": str(_HOUR_MS),
    "segment.ms": str(_HOUR_MS),
    "min.cleanable.dirty.ratio": "0.1",
}


@dataclass(frozen=True)
class Topics:
    prefix: str = "trainhub"
    partitions: int = 3
    replication: int = 1
    retention_ms: int = _WEEK_MS
    min_insync_replicas: int | None = None
    """In-sync copies an acks=all write needs (the topic's `min.insync.replicas`); None: a
    majority of `replication` from three replicas on (2 of 3: one broker may be lost
    without losing a write or refusing one), else 1, whatever the broker's default says."""

    @property
    def min_insync(self) -> int:
        if self.min_insync_replicas is not None:
            return self.min_insync_replicas
        return self.replication // 2 + 1 if self.replication >= 3 else 1

    @property
    def jobs(self) -> str:
        return f"{self.prefix}.jobs"

    @property
    def status(self) -> str:
        return f"{self.prefix}.status"

    @property
    def clusters(self) -> str:
        return f"{self.prefix}.clusters"

    @property
    def hub_state(self) -> str:
        """The hub's state, one record per job (compacted): dispatcher/state_store.py."""
        return f"{self.prefix}.hubstate"

    @property
    def runtimes(self) -> str:
        """Operators' TrainJob runtimes, one record per runtime keyed `KIND/NAMESPACE/NAME`
        (compacted; a tombstone deletes): bus/runtimes.py, dispatcher/runtime_follower.py."""
        return f"{self.prefix}.runtimes"

    @property
    def leader(self) -> str:
        """The hubs' election: whoever holds its one partition in `leader_group` leads; its
        claim records number the epochs (dispatcher/leadership.py)."""
        return f"{self.prefix}.leader"

    @property
    def leader_group(self) -> str:
        return f"{self.prefix}-hub-leader"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}.deadletter"

    @property
    def logs(self) -> str:
        """Workers' answers to log requests, keyed by request id."""
        return f"{self.prefix}.logs"

    def assignments(self, cluster: str) -> str:
        return f"{self.prefix}.assignments.{cluster}"

    @property
    def reports_prefix(self) -> str:
        return f"{self.prefix}.reports."

    def reports(self, cluster: str) -> str:
        """What one cluster's worker reports (its jobs' statuses, hand-backs, heartbeats),
        written by that worker alone: the hub checks each record against the cluster the
        topic belongs to and passes what it accepts on to `status` and `clusters`, which
        only hubs write (see bus/kafka_acls.py)."""
        return f"{self.reports_prefix}{cluster}"

    def cluster_of_reports(self, topic: str) -> str | None:
        """The cluster a reports topic belongs to (None: not a reports topic)."""
        if not topic.startswith(self.reports_prefix):
            return None
        return topic[len(self.reports_prefix) :] or None

    @property
    def hub_group(self) -> str:
        """The consumer group the hub reads the jobs topic in."""
        return f"{self.prefix}-hub"

    @property
    def hub_status_group(self) -> str:
        """The consumer group the hub reads the status topic in: a starting hub reads the
        statuses since its predecessor's last commit, its state from `hub_state`."""
        return f"{self.prefix}-hub-status"

    @property
    def hub_reports_group(self) -> str:
        """The consumer group the hub reads the clusters' reports topics in."""
        return f"{self.prefix}-hub-reports"

    def worker_group(self, cluster: str) -> str:
        """The consumer group a cluster's worker reads its assignments topic in."""
        return f"{self.prefix}-worker-{cluster}"

    def _spec(
        self, name: str, *, compacted: bool = False, partitions: int | None = None
    ) -> TopicSpec:
        return TopicSpec(
            name=name,
            partitions=partitions or self.partitions,
            replication=self.replication,
            retention_ms=None if compacted else self.retention_ms,
            compacted=compacted,
            extra_config=self._replica_config(),
        )

    def _replica_config(self) -> dict[str, str]:
        return {"min.insync.replicas": str(self.min_insync)}

    def shared_specs(self) -> list[TopicSpec]:
        """Topics every deployment has, whatever its clusters."""
        return [
            self._spec(self.jobs),
            self._spec(self.status),
            # Compacted: the newest heartbeat of each cluster is all a restarted hub needs.
            self._spec(self.clusters, compacted=True, partitions=1),
            dataclasses.replace(
                self._spec(self.hub_state, compacted=True),
                # Tombstones (forgotten jobs) cleaned within hours rather than Kafka's day:
                # a starting hub reads what compaction left, so it should leave live jobs.
                extra_config={**self._replica_config(), **_STATE_COMPACTION},
            ),
            # One partition: every reader applies the runtimes in the order they were written,
            # and "read to its end" is one offset.
            self._spec(self.runtimes, compacted=True, partitions=1),
            self._spec(self.leader, partitions=1),
            self._spec(self.dead_letters, partitions=1),
            # Answers are read within seconds of being written; a day is plenty.
            TopicSpec(
                name=self.logs,
                partitions=self.partitions,
                replication=self.replication,
                retention_ms=_DAY_MS,
                extra_config=self._replica_config(),
            ),
        ]

    def assignment_spec(self, cluster: str) -> TopicSpec:
        return self._spec(self.assignments(cluster), partitions=1)

    def reports_spec(self, cluster: str) -> TopicSpec:
        # One partition: the hub reads a cluster's statuses and heartbeats in the order its
        # worker wrote them.
        return self._spec(self.reports(cluster), partitions=1)
