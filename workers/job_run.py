"""One job's run on this cluster: pod phases in, job conditions and restart decisions out."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from schemas.status import ConditionType, JobPhase, JobStatus, ReplicaStatus
from workers.backends.base import PodObservation, PodPhase
from workers.conditions import set_condition
from workers.frameworks.base import ReplicaCounts
from workers.rendering import PodPlan, RenderedJob


@dataclass
class PodState:
    plan: PodPlan
    phase: PodPhase = "Pending"
    exit_code: int | None = None


@dataclass
class Decision:
    """What the worker must do after an observation."""

    restart: list[PodPlan] = field(default_factory=list)
    finished: bool = False
    changed: bool = False


def _retryable(policy: str, exit_code: int | None) -> bool:
    if policy in ("Always", "OnFailure"):
        return True
    if policy == "ExitCode":
        # Signals and runtime kills (>= 128) are worth a retry; 1-127 are the program's verdict.
        return exit_code is not None and exit_code >= 128
    return False


class JobRun:
    def __init__(self, rendered: RenderedJob, cluster: str, attempt: int) -> None:
        self.rendered = rendered
        self.job = rendered.job
        self.cluster = cluster
        self.attempt = attempt
        self.sequence = 0
        self.restarts = 0
        self.pods = {p.name: PodState(p) for p in rendered.pods}
        self.status = JobStatus()
        self.phase = JobPhase.CREATED
        kind = self.job.kind
        set_condition(
            self.status,
            ConditionType.CREATED,
            f"{kind}Created",
            f"{kind} {self.job.metadata.name} is created.",
        )

    @property
    def finished(self) -> bool:
        return self.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED)

    def observe(self, obs: PodObservation) -> Decision:
        decision = Decision()
        pod = self.pods.get(obs.name)
        if pod is None or self.finished:
            return decision
        pod.phase, pod.exit_code = obs.phase, obs.exit_code
        if obs.phase == "Failed":
            policy = pod.plan.restart_policy
            if _retryable(policy, obs.exit_code):
                self.restarts += 1
                if self._over_backoff_limit():
                    decision.changed = self._fail(
                        "BackoffLimitExceeded",
                        f"{self.job.kind} {self.job.metadata.name} has failed because it has "
                        "reached the specified backoff limit",
                    )
                else:
                    pod.phase, pod.exit_code = "Pending", None
                    decision.restart.append(pod.plan)
                    decision.changed = self._set(
                        ConditionType.RESTARTING,
                        JobPhase.RESTARTING,
                        "Restarting",
                        f"{self.job.kind} {self.job.metadata.name} is restarting because "
                        f"{obs.name} exited with code {obs.exit_code}.",
                    )
            else:
                decision.changed = self._fail(
                    "Failed",
                    f"{self.job.kind} {self.job.metadata.name} is failed because {obs.name} "
                    f"exited with code {obs.exit_code} (restartPolicy {policy})."
                    + (f" {obs.message}" if obs.message else ""),
                )
        else:
            decision.changed = self._progress()
        self._count()
        decision.finished = self.finished
        return decision

    def _over_backoff_limit(self) -> bool:
        limit = self.job.run_policy.backoffLimit
        return limit is not None and self.restarts > limit

    def _progress(self) -> bool:
        counts = self.counts()
        if self.rendered.adapter.succeeded(self.job, counts):
            self.status.completionTime = datetime.now(UTC)
            return self._set(
                ConditionType.SUCCEEDED,
                JobPhase.SUCCEEDED,
                "Succeeded",
                f"{self.job.kind} {self.job.metadata.name} is successfully completed.",
            )
        if any(p.phase == "Running" for p in self.pods.values()):
            if self.status.startTime is None:
                self.status.startTime = datetime.now(UTC)
            return self._set(
                ConditionType.RUNNING,
                JobPhase.RUNNING,
                "Running",
                f"{self.job.kind} {self.job.metadata.name} is running.",
            )
        return False

    def _fail(self, reason: str, message: str) -> bool:
        self.status.completionTime = datetime.now(UTC)
        return self._set(ConditionType.FAILED, JobPhase.FAILED, reason, message)

    def _set(self, ctype: ConditionType, phase: JobPhase, reason: str, message: str) -> bool:
        if not set_condition(self.status, ctype, f"{self.job.kind}{reason}", message):
            return False
        self.phase = phase
        return True

    def counts(self) -> dict[str, ReplicaCounts]:
        result: dict[str, ReplicaCounts] = {}
        for rtype in self.job.replica_specs:
            states = [p for p in self.pods.values() if p.plan.replica_type == rtype]
            result[rtype] = ReplicaCounts(
                expected=len(states),
                active=sum(p.phase in ("Pending", "Running") for p in states),
                succeeded=sum(p.phase == "Succeeded" for p in states),
                failed=sum(p.phase == "Failed" for p in states),
            )
        return result

    def _count(self) -> None:
        self.status.replicaStatuses = {
            rtype: ReplicaStatus(active=c.active, succeeded=c.succeeded, failed=c.failed)
            for rtype, c in self.counts().items()
        }

    def pods_to_clean(self) -> list[PodPlan]:
        """Pods cleanPodPolicy removes once the job finished (default None keeps all)."""
        policy = self.job.run_policy.cleanPodPolicy or "None"
        if policy == "All":
            return [p.plan for p in self.pods.values()]
        if policy == "Running":
            return [p.plan for p in self.pods.values() if p.phase in ("Pending", "Running")]
        return []
