"""One job's run on this cluster, as rules without I/O: pod observations, suspension and the
clock come in; job conditions, replica statuses and what to do with which pods go out."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from schemas.conditions import JobStep, condition_words, mark_step, set_condition
from schemas.status import ConditionType, JobCondition, JobPhase, JobStatus, ReplicaStatus
from workers.backends.base import UNSCHEDULABLE_PREFIX, PodObservation, PodPhase
from workers.frameworks.base import ReplicaCounts
from workers.rendering import (
    LABEL_JOB_NAME,
    LABEL_OPERATOR,
    LABEL_REPLICA_TYPE,
    OPERATOR_NAME,
    ConfigMapPlan,
    PodPlan,
    RenderedJob,
    config_map_plans,
)

Clock = Callable[[], datetime]
_ACTIVE: tuple[PodPhase, ...] = ("Pending", "Running")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class PodState:
    plan: PodPlan
    phase: PodPhase = "Pending"
    exit_code: int | None = None
    unschedulable: str | None = None
    """The scheduler's message while no node can take the pod."""
    restarts: int = 0
    """In-place restarts of this pod's containers already counted (see `PodObservation`)."""
    uid: str | None = None
    """The pod object those restarts belong to, where the backend names one."""
    held: bool = False
    """Not created yet: its replica type waits for those it depends on (a TrainJob's nodes
    for its initializers)."""
    node: str | None = None
    """The node it was seen on, where the backend says."""
    started: datetime | None = None
    """When it was first seen on a node or past Pending (for pod listings)."""


@dataclass
class Decision:
    """What the worker must do after a step of the run, in this order."""

    restart: list[PodPlan] = field(default_factory=list)
    """Delete, then create again under the same name (with its service)."""
    delete: list[PodPlan] = field(default_factory=list)
    """Delete with its service."""
    create: list[PodPlan] = field(default_factory=list)
    """Create with its service."""
    changed: bool = False
    """The conditions changed: publish the status."""
    finished: bool = False
    """This step finished the job (Succeeded or Failed)."""
    unschedulable: bool = False
    """`pending_reason` changed to a new scheduler message: tell the hub."""
    restarted_in_place: int = 0
    """Container restarts the kubelet made (or is making) that this step counted."""
    config_maps: list[ConfigMapPlan] = field(default_factory=list)
    """ConfigMaps whose data follows the running pods and changed: write them again."""


def _exit(obs: PodObservation) -> str:
    return "an unknown code" if obs.exit_code is None else f"code {obs.exit_code}"


def _detail(obs: PodObservation) -> str:
    return f" {obs.message}" if obs.message else ""


def _retryable(policy: str, exit_code: int | None) -> bool:
    if policy in ("Always", "OnFailure"):
        return True
    if policy == "ExitCode":
        # Signals and runtime kills (>= 128) are worth a retry; 1-127 are the program's verdict.
        # A pod that failed without its container terminating (evicted, its node lost) is the
        # infrastructure's fault: upstream reads a magic 0xbeef there, which is >= 128 too.
        return exit_code is None or exit_code >= 128
    return False


class JobRun:
    def __init__(
        self,
        rendered: RenderedJob,
        cluster: str,
        attempt: int,
        *,
        clock: Clock = utc_now,
        conditions: Sequence[JobCondition] = (),
    ) -> None:
        """`conditions`: the job's so far (the assignment's), which this run's add to."""
        self.rendered = rendered
        self.job = rendered.job
        self.cluster = cluster
        self.attempt = attempt
        self.clock = clock
        # Milliseconds since the epoch, so that a restarted worker's updates still sort after
        # those its predecessor published for the same attempt.
        self.sequence = int(time.time() * 1000)
        self.restarts = 0
        """Pod re-creations after retryable failures, counted against `backoffLimit`."""
        self.pods = {p.name: self._fresh_pod(p) for p in rendered.pods}
        self.status = JobStatus(conditions=[c.model_copy() for c in conditions])
        self.phase = JobPhase.CREATED
        self.suspended = False
        self.pending_reason: str | None = None
        """The scheduler's message for a pod that no node can take, while one cannot."""
        self.unschedulable_since: float | None = None
        """Seconds since the epoch (on `clock`) since when some pod has been unschedulable."""
        self.unmarked: tuple[str, str] | None = None
        """The reason and message of the latest step that the job's kind marks with no
        condition (a TrainJob running): what its status tells instead of the latest
        condition, which is older news."""
        self._config_data = {c.name: c.data for c in rendered.config_maps}
        """Each ConfigMap's data as last decided (`Decision.config_maps` writes it)."""
        if not self._set(JobStep.CREATED, JobPhase.CREATED) and self.status.conditions:
            # Created already (the hub's, for a job it held): the news is still that.
            created = self.status.condition(ConditionType.CREATED)
            if created is not None and created is not self.status.conditions[-1]:
                self.unmarked = (created.reason or "Created", created.message or "")

    def _fresh_pod(self, plan: PodPlan) -> PodState:
        """A pod not started yet; held when its replica type depends on others. A run taken
        back after a restart holds those too until it sees them, or their dependencies done
        (creating a pod that exists is no harm)."""
        depends = self.rendered.adapter.depends_on(self.job, plan.replica_type)
        return PodState(plan, held=bool(depends))

    def _released(self) -> list[PodPlan]:
        """The held pods whose replica types' dependencies are met now, no longer held."""
        met: dict[str, bool] = {}
        released = []
        for pod in self.pods.values():
            rtype = pod.plan.replica_type
            if not pod.held:
                continue
            if rtype not in met:
                met[rtype] = all(
                    self._reached(dependency, status)
                    for dependency, status in self.rendered.adapter.depends_on(self.job, rtype)
                )
            if met[rtype]:
                pod.held = False
                released.append(pod.plan)
        return released

    def _reached(self, rtype: str, status: str) -> bool:
        """JobSet's dependsOn: `Complete`, every pod of `rtype` succeeded; `Ready`, every pod
        running or succeeded."""
        wanted: tuple[PodPhase, ...] = (
            ("Succeeded",) if status == "Complete" else ("Running", "Succeeded")
        )
        return all(
            not p.held and p.phase in wanted
            for p in self.pods.values()
            if p.plan.replica_type == rtype
        )

    @property
    def kind(self) -> str:
        return self.job.kind

    @property
    def name(self) -> str:
        return self.job.metadata.name

    @property
    def finished(self) -> bool:
        return self.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Decision:
        """The job arrived: create every pod, or hold them all when it arrives suspended."""
        if self.job.run_policy.suspend:
            decision = self.suspend()
            decision.delete = []  # none exists yet
            return decision
        self.status.startTime = self.clock()
        return Decision(create=[p.plan for p in self.pods.values() if not p.held])

    def suspend(self) -> Decision:
        """Delete every pod (and service), active counts to 0, Running False, Suspended True."""
        if self.finished or self.suspended:
            return Decision()
        decision = Decision(delete=[p.plan for p in self.pods.values() if not p.held])
        self.suspended = True
        for pod in self.pods.values():
            pod.unschedulable = None
        self._update_pending()
        if self.status.is_true(ConditionType.RUNNING):
            # The v1 kinds' operator stops Running with the suspension's reason and words.
            words = condition_words(self.kind).condition(
                JobStep.SUSPENDED, self.kind, self.name, ""
            )
            if words is not None:
                set_condition(
                    self.status,
                    ConditionType.RUNNING,
                    words.reason,
                    words.message,
                    value="False",
                    now=self.clock(),
                )
        self._set(JobStep.SUSPENDED, JobPhase.SUSPENDED)
        decision.changed = True
        self._count()
        return decision

    def resume(self) -> Decision:
        """Create every pod again under its name; Suspended False and a new startTime."""
        if self.finished or not self.suspended:
            return Decision()
        self.suspended = False
        for name, pod in self.pods.items():
            self.pods[name] = self._fresh_pod(pod.plan)
        self._mark(JobStep.RESUMED)
        self.phase = JobPhase.CREATED
        self.status.startTime = self.clock()
        self._count()
        return Decision(create=[p.plan for p in self.pods.values() if not p.held], changed=True)

    def fail(self, message: str) -> Decision:
        """Fail the job from outside the pods' story (the cluster refused its objects)."""
        decision = Decision()
        if not self.finished:
            self._mark(JobStep.CREATION_FAILED)
        decision.changed = self._fail(message)
        decision.finished = decision.changed
        return decision

    # -- pods -----------------------------------------------------------------------------

    def follow_scheduling(self, obs: PodObservation) -> bool:
        """Only the scheduler's word on one of the job's pods (a delegated job's, whose
        story is its operator's): `pending_reason` and `unschedulable_since` follow it, so
        that the unschedulable timeout hands the job back as in direct mode. True when
        there is a new reason to tell; a run that ended or is suspended has none."""
        pod = self.pods.get(obs.name)
        if pod is None or self.finished or self.suspended:
            for each in self.pods.values():
                each.unschedulable = None
            self._update_pending()
            return False
        unschedulable = obs.phase == "Pending" and (obs.message or "").startswith(
            UNSCHEDULABLE_PREFIX
        )
        if unschedulable or obs.phase != "Pending":
            pod.unschedulable = obs.message if unschedulable else None
        return self._update_pending()

    def observe(self, obs: PodObservation) -> Decision:
        pod = self.pods.get(obs.name)
        if pod is None or self.finished or self.suspended:
            return Decision()
        decision = Decision()
        pod.held = False  # seen, so it exists
        pod.phase, pod.exit_code = obs.phase, obs.exit_code
        pod.node = obs.node or pod.node
        if pod.started is None and (obs.node is not None or obs.phase != "Pending"):
            pod.started = self.clock()
        unschedulable = obs.phase == "Pending" and (obs.message or "").startswith(
            UNSCHEDULABLE_PREFIX
        )
        if unschedulable or obs.phase != "Pending":
            pod.unschedulable = obs.message if unschedulable else None
        over_limit = False
        fresh = self._fresh_restarts(pod, obs)
        if obs.phase == "Succeeded" and pod.plan.restart_policy == "Always":
            # A kubelet restarts an Always container whatever its exit: such a pod never
            # succeeds. Backends that report the exit (sim, local) restart it here.
            over_limit = self._pod_failed(pod, obs, decision)
        elif obs.phase == "Failed":
            self.restarts += fresh
            decision.restarted_in_place = fresh
            over_limit = self._pod_failed(pod, obs, decision)
        elif fresh:
            over_limit = self._restarted_in_place(obs, fresh, decision)
        elif not obs.restarting:
            decision.changed = self._progress()
        decision.unschedulable = self._update_pending()
        self._count()
        if self.finished:
            decision.finished = True
            # The backoff limit stops the job: its other pods must not run on.
            decision.delete = self._to_delete(stop_active=over_limit)
        else:
            decision.config_maps = self._changed_config_maps()
            decision.create = self._released()
        return decision

    def _changed_config_maps(self) -> list[ConfigMapPlan]:
        """The ConfigMaps whose data the pods now Running change (an MPIJob's host discovery
        script lists its running workers), recorded as decided."""
        if not self._config_data:
            return []
        running = [name for name, pod in self.pods.items() if pod.phase == "Running"]
        changed = []
        for plan in config_map_plans(self.job, self.attempt, running):
            if self._config_data.get(plan.name) != plan.data:
                self._config_data[plan.name] = plan.data
                changed.append(plan)
        return changed

    @staticmethod
    def _fresh_restarts(pod: PodState, obs: PodObservation) -> int:
        """In-place restarts that `obs` shows and that are not counted yet. A pod object of
        its own (re-created under the name, resumed) starts from zero; a pod that succeeded
        is done, and restarts first seen then are history (upstream counts only running
        pods' restarts too)."""
        if obs.uid is not None and obs.uid != pod.uid:
            pod.uid, pod.restarts = obs.uid, 0
        fresh = obs.restarts - pod.restarts
        if obs.phase == "Succeeded" or fresh <= 0:
            return 0
        pod.restarts = obs.restarts
        return fresh

    def _restarted_in_place(self, obs: PodObservation, fresh: int, decision: Decision) -> bool:
        """The kubelet restarts a container of a pending or running pod (Always, OnFailure):
        count it; the pod stays, so only the condition changes. True when the backoff limit
        failed the job."""
        self.restarts += fresh
        decision.restarted_in_place = fresh
        if self._past_backoff_limit():
            decision.changed = self._fail_backoff(obs)
            return True
        if obs.restarting:
            decision.changed = self._restarting(obs)
        else:
            # Seen only once the container ran again (a relist, an adopted run).
            decision.changed = self._progress()
        return False

    def _pod_failed(self, pod: PodState, obs: PodObservation, decision: Decision) -> bool:
        """Restart the pod or fail the job; True when the backoff limit failed it."""
        policy = pod.plan.restart_policy
        if obs.phase == "Failed" and self.rendered.adapter.tolerates_failure(
            self.job, pod.plan.replica_type
        ):
            self._progress()
            decision.changed = True  # the replica counts
            return False
        if not _retryable(policy, obs.exit_code):
            decision.changed = self._fail(
                f"{self.kind} {self.name} is failed because {obs.name} exited with "
                f"{_exit(obs)} (restartPolicy {policy}).{_detail(obs)}",
            )
            return False
        self.restarts += 1
        if self._past_backoff_limit():
            decision.changed = self._fail_backoff(obs)
            return True
        pod.phase, pod.exit_code, pod.unschedulable = "Pending", None, None
        pod.node = pod.started = None  # made again: a new pod, wherever it lands
        decision.restart.append(pod.plan)
        decision.changed = self._restarting(obs)
        return False

    def _past_backoff_limit(self) -> bool:
        """Restarts exceed `backoffLimit` (the spec's rule, for every restartPolicy)."""
        limit = self.job.run_policy.backoffLimit
        return limit is not None and self.restarts > limit

    def _fail_backoff(self, obs: PodObservation) -> bool:
        # Upstream's reason and sentence; the limit and the last exit are ours.
        return self._fail(
            f"Job {self.name} has failed because it has reached the specified backoff limit "
            f"({self.job.run_policy.backoffLimit}): {obs.name} exited with {_exit(obs)}."
            f"{_detail(obs)}",
        )

    def _restarting(self, obs: PodObservation) -> bool:
        return self._set(
            JobStep.RESTARTING,
            JobPhase.RESTARTING,
            f"{self.kind} {self.name} is restarting because {obs.name} exited with "
            f"{_exit(obs)} (restart {self.restarts}).{_detail(obs)}",
        )

    def _progress(self) -> bool:
        if self.rendered.adapter.succeeded(self.job, self.counts()):
            self.status.completionTime = self.clock()
            return self._set(JobStep.SUCCEEDED, JobPhase.SUCCEEDED)
        if any(p.phase == "Running" for p in self.pods.values()):
            if self.status.startTime is None:
                self.status.startTime = self.clock()
            return self._set(JobStep.RUNNING, JobPhase.RUNNING)
        return False

    def _update_pending(self) -> bool:
        """Follow the scheduler's message; True when there is a new one to tell."""
        reason = next((p.unschedulable for p in self.pods.values() if p.unschedulable), None)
        changed = reason != self.pending_reason
        self.pending_reason = reason
        if reason is None:
            self.unschedulable_since = None
        elif self.unschedulable_since is None:
            self.unschedulable_since = self.clock().timestamp()
        return changed and reason is not None

    # -- deadlines ------------------------------------------------------------------------

    def deadline(self) -> datetime | None:
        """When `activeDeadlineSeconds` (from startTime) runs out, while the job is active."""
        seconds = self.job.run_policy.activeDeadlineSeconds
        start = self.status.startTime
        if seconds is None or start is None or self.finished or self.suspended:
            return None
        return _after(start, seconds)

    def expire_deadline(self) -> Decision:
        """Fail the job if its active deadline has passed (the worker's timer asks on time)."""
        deadline = self.deadline()
        if deadline is None or self.clock() < deadline:
            return Decision()
        decision = Decision()
        # Upstream's reason and message, word for word (pkg/controller.v1/common/job.go).
        decision.changed = self._fail(
            f"Job {self.name} has failed because it was active longer than specified deadline",
        )
        self._count()
        decision.finished = self.finished
        decision.delete = self._to_delete(stop_active=True)
        return decision

    def expiry(self) -> datetime | None:
        """When `ttlSecondsAfterFinished` runs out: then the job's objects go, run and all."""
        ttl = self.job.run_policy.ttlSecondsAfterFinished
        done = self.status.completionTime
        if ttl is None or done is None or not self.finished:
            return None
        return _after(done, ttl)

    def next_timer(self) -> datetime | None:
        """The next moment the worker must look at this run again."""
        return self.expiry() if self.finished else self.deadline()

    # -- status ---------------------------------------------------------------------------

    def _fail(self, message: str) -> bool:
        if self.finished:
            return False
        self.status.completionTime = self.clock()
        return self._set(JobStep.FAILED, JobPhase.FAILED, message)

    def _set(self, step: JobStep, phase: JobPhase, detail: str = "") -> bool:
        """Mark the step and enter the phase it means; True when either changed. A run taken
        back after a restart starts Created with its conditions as they were (Running
        already True): the phase must follow them all the same."""
        changed = self._mark(step, detail)
        if self.phase != phase:
            self.phase, changed = phase, True
            if condition_words(self.kind).condition(step, self.kind, self.name, detail) is None:
                said = detail or f"{self.kind} {self.name} is {phase.value.lower()}."
                self.unmarked = (phase.value, said)
        return changed

    def _mark(self, step: JobStep, detail: str = "") -> bool:
        """The condition the job's kind sets at `step` (schemas/conditions.py)."""
        changed = mark_step(self.status, step, self.kind, self.name, detail, now=self.clock())
        if changed:
            self.unmarked = None
        return changed

    def counts(self) -> dict[str, ReplicaCounts]:
        result: dict[str, ReplicaCounts] = {}
        for rtype in self.job.replica_specs:
            states = [p for p in self.pods.values() if p.plan.replica_type == rtype]
            result[rtype] = ReplicaCounts(
                expected=len(states),
                active=0
                if self.suspended
                else sum(p.phase in _ACTIVE and not p.held for p in states),
                succeeded=sum(p.phase == "Succeeded" for p in states),
                failed=sum(p.phase == "Failed" for p in states),
                succeeded_indexes=frozenset(p.plan.index for p in states if p.phase == "Succeeded"),
                running=0
                if self.suspended
                else sum(p.phase == "Running" and not p.held for p in states),
                held=bool(states) and all(p.held for p in states),
            )
        return result

    def _count(self) -> None:
        # Upstream counts a succeeded job's replicas that are still active as succeeded:
        # they are stopped (cleanPodPolicy) or left to finish, never reported running.
        done = self.phase == JobPhase.SUCCEEDED
        counts = self.counts()
        self.status.jobsStatus = self.rendered.adapter.jobs_status(
            self.job,
            {
                rtype: replace(c, active=0, running=0, succeeded=c.succeeded + c.active)
                if done
                else c
                for rtype, c in counts.items()
            },
            suspended=self.suspended,
            failed=self.phase == JobPhase.FAILED,
        )
        self.status.replicaStatuses = {
            rtype: ReplicaStatus(
                active=0 if done else c.active,
                succeeded=c.succeeded + c.active if done else c.succeeded,
                failed=c.failed,
                selector=self._selector(rtype),
            )
            for rtype, c in counts.items()
        }

    def _selector(self, rtype: str) -> str:
        # As upstream writes it: the job's labels and the replica type, keys in order; the
        # operator's name keeps out pods another operator made for a job of the same name.
        return (
            f"{LABEL_JOB_NAME}={self.name},{LABEL_OPERATOR}={OPERATOR_NAME},"
            f"{LABEL_REPLICA_TYPE}={rtype.lower()}"
        )

    def _to_delete(self, *, stop_active: bool) -> list[PodPlan]:
        """Pods to delete now that the job finished: cleanPodPolicy's (All; Running for
        Running and Pending; None keeps all), plus every active pod when `stop_active`.
        Upstream deletes finished pods too when the backoff limit or the deadline ends the
        job; here they stay, under cleanPodPolicy None, so that their logs tell why."""
        policy = self.job.run_policy.cleanPodPolicy or "None"
        return [
            p.plan
            for p in self.pods.values()
            if not p.held
            and (policy == "All" or ((policy == "Running" or stop_active) and p.phase in _ACTIVE))
        ]


def _after(moment: datetime, seconds: int) -> datetime | None:
    """`seconds` after `moment`; None (never) past what a datetime holds (year 9999): a
    deadline of 10^14 s is valid int64 and means no deadline in practice."""
    try:
        return moment + timedelta(seconds=seconds)
    except OverflowError:
        return None
