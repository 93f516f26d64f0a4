"""A job's pods as the SDK reports them: named from the job document the hub put on the
status topic, rendered exactly as every worker renders it, and phased as the worker of the
job's cluster answers (`with_phases`).

Pod names are deterministic (`<job>-<replica type>-<index>`) on every backend (kube, local,
sim), so naming needs no round trip to the worker and works whichever cluster runs the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from schemas.errors import ContractError
from schemas.events import ListedPod, ListedPodPhase
from schemas.job_parsing import parse_placed_job
from trainhub.sdk_errors import TrainHubError
from trainhub.sdk_view import TrainHubJob
from workers.rendering import LABEL_JOB_ROLE, render_job


class JobPodsUnknownError(TrainHubError):
    """The status topic no longer holds the job's document (retention), so its pods cannot
    be named."""


class JobPod(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    namespace: str
    replica_type: str
    replica_index: int
    is_master: bool
    """Carries `training.kubeflow.org/job-role=master` (Kubeflow's master replica)."""
    cluster: str | None
    """The cluster the job is placed on; None while it is placed nowhere."""
    labels: dict[str, str]
    phase: ListedPodPhase | None = None
    """The pod's Kubernetes phase as the worker of its cluster tells it (`Unknown`: the worker
    answered but cannot tell); None when the worker did not answer in time or the job is
    placed nowhere."""
    node_name: str | None = None
    start_time: datetime | None = None
    reason: str | None = None
    """Why the pod is in its phase, where the worker says (`Unschedulable`, `Suspended`...)."""
    message: str | None = None


def job_pods(job: TrainHubJob) -> list[JobPod]:
    """Every pod of the job's current run, in replica order."""
    if job.spec is None:
        raise JobPodsUnknownError(
            f"the status topic no longer holds the document of job {job.key}: "
            "its pods cannot be named"
        )
    try:
        parsed = parse_placed_job(job.spec, job.runtime)
    except ContractError as exc:
        raise JobPodsUnknownError(f"job {job.key} has no pods: {exc}") from exc
    rendered = render_job(parsed, attempt=max(job.attempt, 1))
    return [
        JobPod(
            name=pod.name,
            namespace=pod.namespace,
            replica_type=pod.replica_type,
            replica_index=pod.index,
            is_master=pod.labels.get(LABEL_JOB_ROLE) == "master",
            cluster=job.cluster,
            labels=dict(pod.labels),
        )
        for pod in rendered.pods
    ]


def with_phases(pods: list[JobPod], listed: Mapping[str, ListedPod] | None) -> list[JobPod]:
    """The pods with what the worker told of each (`listed`, by pod name; None: it did not
    answer); a pod it did not list is `Unknown` to it."""
    if listed is None:
        return pods
    phased = []
    for pod in pods:
        told = listed.get(pod.name)
        if told is None:
            phased.append(pod.model_copy(update={"phase": "Unknown"}))
            continue
        update = told.model_dump(include={"phase", "node_name", "start_time", "reason", "message"})
        phased.append(pod.model_copy(update=update))
    return phased
