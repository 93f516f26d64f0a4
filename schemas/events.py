"""The CloudEvents 1.0 envelope and the typed payload of every trainhub event."""

from __future__ import annotations

import builtins
import os
import random
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.names import DNS1123_LABEL_PATTERN
from schemas.status import JobCondition, JobPhase, JobStatus

SPEC_VERSION = "1.0"


class _EventIds:
    """Random (version 4) UUID strings from a generator seeded by the OS once per process and
    again in a forked child. Event ids need to be unique, not secret; `uuid.uuid4()` asks the
    OS for every id, and at three events per job that was a few percent of the hub's time."""

    def __init__(self) -> None:
        self._random = random.Random(os.urandom(32))
        os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        self._random.seed(os.urandom(32))

    def __call__(self) -> str:
        bits = self._random.getrandbits(128)
        # The version (4) and variant (10) bits, as RFC 9562 sets them.
        bits = (bits & ~(0xF000 << 64) & ~(0xC000 << 48)) | (0x4000 << 64) | (0x8000 << 48)
        text = f"{bits:032x}"
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


new_event_id = _EventIds()


class EventType:
    """CloudEvent `type` values; all live under `io.trainhub.`."""

    JOB_SUBMITTED = "io.trainhub.job.submitted"
    JOB_UPDATED = "io.trainhub.job.updated"
    JOB_DELETED = "io.trainhub.job.deleted"
    JOB_SUSPENDED = "io.trainhub.job.suspended"
    JOB_RESUMED = "io.trainhub.job.resumed"
    JOB_ASSIGNED = "io.trainhub.job.assigned"
    JOB_REVOKED = "io.trainhub.job.revoked"
    JOB_HANDED_BACK = "io.trainhub.job.handedback"
    JOB_STATUS = "io.trainhub.job.status"
    CLUSTER_HEARTBEAT = "io.trainhub.cluster.heartbeat"
    CLUSTER_RETIRED = "io.trainhub.cluster.retired"
    LOGS_REQUESTED = "io.trainhub.logs.requested"
    LOGS_CHUNK = "io.trainhub.logs.chunk"
    PODS_REQUESTED = "io.trainhub.pods.requested"
    PODS_LISTED = "io.trainhub.pods.listed"
    HUB_LEADER = "io.trainhub.hub.leader"
    RUNTIME_APPLIED = "io.trainhub.runtime.applied"


class CloudEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    specversion: str = SPEC_VERSION
    id: str = Field(default_factory=new_event_id, min_length=1, max_length=256)
    source: str = Field(min_length=1, max_length=256)
    type: str = Field(pattern=r"^io\.trainhub\.[a-z.]+$", max_length=128)
    subject: str | None = Field(default=None, max_length=256)
    time: datetime = Field(default_factory=lambda: datetime.now(UTC))
    datacontenttype: str = "application/json"
    epoch: int | None = Field(default=None, ge=1)
    """Extension attribute (`ce_epoch`): the leading hub's epoch on what a hub publishes.
    Workers and readers refuse a hub's event of an older epoch than one they have seen, so
    a hub that lost its leadership while paused can never be acted on or believed."""
    data: dict[str, Any] = Field(default_factory=dict)

    def data_as(self, model: builtins.type[_M]) -> _M:
        return model.model_validate(self.data)


_M = TypeVar("_M", bound=BaseModel)


def make_event(
    event_type: str, source: str, subject: str, data: BaseModel | dict[str, Any]
) -> CloudEvent:
    payload = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
    return CloudEvent(type=event_type, source=source, subject=subject, data=payload)


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobSubmitted(_Payload):
    """The raw job document: the hub validates it, so a bad job still has a traceable event."""

    job: dict[str, Any]


class JobUpdated(_Payload):
    """A job's new document, replacing the whole spec (dispatcher/job_updates.py says when)."""

    job: dict[str, Any]


class JobRef(_Payload):
    """Names a job for delete, suspend and resume requests."""

    uid: str = Field(min_length=1, max_length=128)


class HubLeader(_Payload):
    """A hub took the lead: announced first on every topic it writes, so that anything an
    older leader writes after it is refused (`CloudEvent.epoch`)."""

    epoch: int = Field(ge=1)
    instance: str


class ClusterScore(_Payload):
    name: str
    feasible: bool
    score: float | None = None
    reason: str | None = None


class PlacementDecision(_Payload):
    """Why a job went where it went, or why it went nowhere.

    A decision lists the chosen cluster and the best few feasible ones (and, when nothing
    was chosen, the first few rejected ones by name, with their reasons) in `clusters`, and
    counts the rest: `considered` clusters, `feasible` of them, and the rejected ones per
    kind of reason in `rejected`. Listing every cluster in every decision cost more than the
    decision itself at 1,000 clusters; `trainhub plan` still shows every one. A decision
    without `considered` (from an older hub) lists every cluster in `clusters`.
    """

    chosen: str | None
    clusters: list[ClusterScore] = Field(default_factory=list)
    considered: int | None = None
    """How many clusters were judged; None: `clusters` lists every one."""
    feasible: int | None = None
    """How many of them could take the job now."""
    rejected: dict[str, int] | None = None
    """The other clusters, counted by kind of reason ("insufficient cpu": 812, ...)."""

    def chosen_only(self) -> PlacementDecision:
        """The chosen cluster and its score, and the counts, without the other clusters."""
        considered, feasible, rejected = self.counts()
        return PlacementDecision.model_construct(
            chosen=self.chosen,
            clusters=[c for c in self.clusters if c.name == self.chosen],
            considered=considered,
            feasible=feasible,
            rejected=rejected,
        )

    def counts(self) -> tuple[int, int, dict[str, int]]:
        """Clusters considered, feasible, and rejected by kind of reason (for a decision that
        lists every cluster, by the reason itself)."""
        if self.considered is not None:
            return self.considered, self.feasible or 0, dict(self.rejected or {})
        rejected: dict[str, int] = {}
        for c in self.clusters:
            if not c.feasible:
                reason = c.reason or "rejected"
                rejected[reason] = rejected.get(reason, 0) + 1
        return len(self.clusters), sum(1 for c in self.clusters if c.feasible), rejected

    def summary(self) -> str:
        """ "2/1000 clusters can take the job now; 812 insufficient cpu, 186 ...": the counts
        in words, the most common reason first."""
        considered, feasible, rejected = self.counts()
        text = f"{feasible}/{considered} clusters can take the job now"
        if rejected:
            kinds = sorted(rejected.items(), key=lambda item: (-item[1], item[0]))
            text += "; " + ", ".join(f"{count} {kind}" for kind, count in kinds)
        return text


class JobAssigned(_Payload):
    uid: str
    cluster: str
    attempt: int = Field(ge=1)
    job: dict[str, Any]
    runtime: dict[str, Any] | None = None
    """A TrainJob's: the (Cluster)TrainingRuntime the hub resolved and placed it against,
    which the worker renders it with (whatever runtimes it knows, or was told of since)."""
    placement: PlacementDecision | None = None
    conditions: list[JobCondition] = Field(default_factory=list)
    """The job's conditions so far (the hub's: `Created`, and `Suspended` False once a held
    job was resumed), which the run's own add to, as they accumulate on upstream's object."""


class JobRevoked(_Payload):
    uid: str
    cluster: str
    attempt: int = Field(ge=1)
    reason: str


class JobHandedBack(_Payload):
    uid: str
    cluster: str
    attempt: int = Field(ge=1)
    reason: str
    stopping: bool = False
    """Handed back because its worker stopped (its pods die with it), not because the
    cluster failed the job: the hub does not keep the job off the cluster."""


class ClusterRetired(_Payload):
    """An operator removed a member cluster whose worker is gone for good (`trainhub
    retire-cluster`): the hub forgets it and moves its unfinished jobs elsewhere. Keyed by
    the cluster's name on the clusters topic, so compaction keeps it in place of the
    heartbeats; the worker's next heartbeat, if one ever comes, registers the cluster again."""

    name: str = Field(min_length=1, max_length=63, pattern=DNS1123_LABEL_PATTERN)
    reason: str | None = Field(default=None, max_length=1024)


class JobStatusUpdate(_Payload):
    """A job's lifecycle step; `attempt` and `sequence` order updates and fence revoked runs."""

    uid: str
    name: str | None = None
    namespace: str | None = None
    kind: str | None = None
    framework: str | None = None
    queue: str | None = None
    priority_class: str | None = None
    """The job's `schedulingPolicy.priorityClass` (hub statuses; None: it names none)."""
    priority: int | None = None
    """The priority the hub places the job at: the number its `placement.priority_classes`
    gives the class, or the default (0) for a job that names none (hub statuses; None: the
    class is one the hub does not know, and the job is rejected)."""
    phase: JobPhase
    cluster: str | None = None
    attempt: int = Field(default=0, ge=0)
    sequence: int = Field(default=0, ge=0)
    reason: str | None = None
    message: str | None = None
    status: JobStatus | None = None
    placement: PlacementDecision | None = None
    submission: str | None = None
    """Id of the `job.submitted` event this run came from (dedupes redelivered submissions)."""
    job: dict[str, Any] | None = None
    """The job document, on the hub's first `Queued` update: a restarted hub rebuilds from it."""
    runtime: dict[str, Any] | None = None
    """With a TrainJob's `job`: the runtime the hub resolved it against (`JobAssigned`)."""


class RuntimeApplied(_Payload):
    """An operator's (Cluster)TrainingRuntime (`trainhub runtime apply`), on the compacted
    runtimes topic keyed `KIND/NAMESPACE/NAME`; a tombstone of that key deletes it."""

    runtime: dict[str, Any]


class LogsRequested(_Payload):
    """Asks the worker of the job's cluster for its pods' logs (on that cluster's assignments
    topic); the answer comes as `LogsChunk` events on the logs topic, keyed by `request_id`."""

    request_id: str = Field(min_length=1, max_length=128)
    uid: str = Field(min_length=1, max_length=128)
    pod: str | None = Field(default=None, max_length=253)
    """One pod of the job, or None for all of them."""
    tail_lines: int | None = Field(default=None, ge=0)
    """Only the last lines of what each pod wrote so far; None for everything."""
    follow: bool = False
    """Keep sending new text until the job finishes or the deadline passes."""
    deadline: datetime
    """Nothing is sent after it, and a request first seen after it is dropped."""


class LogsChunk(_Payload):
    """A piece of one pod's log; `seq` counts from 0 per request, `final` ends the answer."""

    request_id: str = Field(min_length=1, max_length=128)
    uid: str
    cluster: str
    seq: int = Field(ge=0)
    pod: str | None = None
    text: str = ""
    final: bool = False
    error: str | None = None
    """Why the request could not be answered (only on the final chunk)."""


ListedPodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]
"""A Kubernetes pod's `status.phase`."""
POD_MESSAGE_CHARS = 1024
"""A listed pod's reason and message are clipped to this many characters: they inform, and a
job of many pods must still fit one event."""


class PodsRequested(_Payload):
    """Asks the worker of the job's cluster for the phase of each of the job's pods (on that
    cluster's assignments topic); the answer is one `PodsListed` on the logs topic, keyed by
    `request_id`."""

    request_id: str = Field(min_length=1, max_length=128)
    uid: str = Field(min_length=1, max_length=128)
    deadline: datetime
    """A request first seen after it is dropped: nobody waits for the answer any more."""


class ListedPod(_Payload):
    """One pod of a job as its worker knows it, named and phased as Kubernetes does."""

    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = Field(default=None, max_length=253)
    """None where the backend does not say."""
    phase: ListedPodPhase
    """`Unknown`: the worker cannot tell (a pod of a run it no longer follows)."""
    node_name: str | None = None
    start_time: datetime | None = None
    """When the pod started on its node, where known."""
    reason: str | None = None
    """A word for why it is in its phase (`Unschedulable`, `Suspended`, `Evicted`...)."""
    message: str | None = None

    @field_validator("reason", "message")
    @classmethod
    def _clipped(cls, value: str | None) -> str | None:
        return value[:POD_MESSAGE_CHARS] if value is not None else None


class PodsListed(_Payload):
    """The answer to a `PodsRequested`: the job's pods the worker knows, in name order, or
    why it cannot say."""

    request_id: str = Field(min_length=1, max_length=128)
    uid: str
    cluster: str
    pods: list[ListedPod] = Field(default_factory=list)
    error: str | None = None
    """Why the request could not be answered (the job has no pods on the cluster)."""
