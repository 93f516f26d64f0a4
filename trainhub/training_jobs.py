"""What `TrainingClient` builds and reads: upstream 1.9's constants, a PyTorchJob or TFJob
made from a function or an image as upstream's `create_job` makes it, the job objects and pods
it returns from trainhub's view of a job, and the merge patch `update_job` applies."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC
from typing import Any

from schemas.status import ConditionType, JobPhase
from trainhub.sdk_functions import container_resources, function_command
from trainhub.sdk_pods import JobPod
from trainhub.sdk_view import TrainHubJob
from trainhub.training_documents import from_document, to_document
from trainhub.training_models import (
    JOB_MODELS,
    KubeflowOrgV1JobCondition,
    V1EnvVar,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
)

DEFAULT_TIMEOUT = 120
"""Upstream's request timeout, seconds: here, how long a call may take to read the view."""
DEFAULT_PIP_INDEX_URL = "https://pypi.org/simple"
API_VERSION = "kubeflow.org/v1"
PYTORCHJOB_KIND = "PyTorchJob"
TFJOB_KIND = "TFJob"
CONTAINERS = {
    "TFJob": "tensorflow",
    "PyTorchJob": "pytorch",
    "XGBoostJob": "xgboost",
    "MPIJob": "mpi",
    "PaddleJob": "paddle",
    "JAXJob": "jax",
}
BASE_IMAGES = {
    TFJOB_KIND: "docker.io/tensorflow/tensorflow:2.9.1",
    PYTORCHJOB_KIND: "docker.io/pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime",
}
"""The kinds upstream makes from a function or an image, and their default images."""
ISTIO_SIDECAR_INJECTION = "sidecar.istio.io/inject"
JOB_CONDITIONS = frozenset(
    {
        ConditionType.CREATED.value,
        ConditionType.RUNNING.value,
        ConditionType.RESTARTING.value,
        ConditionType.SUCCEEDED.value,
        ConditionType.FAILED.value,
    }
)
"""Upstream's; `wait_for_job_conditions` takes trainhub's `Suspended` as well."""
WAITABLE = JOB_CONDITIONS | {ConditionType.SUSPENDED.value}
_SERVER_METADATA = (
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
_NO_PODS = (None, JobPhase.QUEUED, JobPhase.SUSPENDED, JobPhase.DELETED, JobPhase.REJECTED)


def check_kind(job_kind: object) -> str:
    if not isinstance(job_kind, str) or job_kind not in JOB_MODELS:
        raise ValueError(f"Job kind must be one of these: {list(JOB_MODELS)} (got {job_kind!r})")
    return job_kind


def has_condition(conditions: Sequence[Any], condition_type: str) -> bool:
    """Upstream's: a condition of that type whose status is "True"."""
    return any(c.type == condition_type and c.status == "True" for c in conditions)


# -- documents from a function or an image ---------------------------------------------------


def function_job(
    *,
    job_kind: str,
    name: str,
    namespace: str,
    train_func: Callable[..., Any] | None,
    parameters: Mapping[str, Any] | None,
    base_image: str | None,
    num_workers: int | None,
    num_procs_per_worker: int | str | None,
    resources_per_worker: Any,
    num_chief_replicas: int | None,
    num_ps_replicas: int | None,
    packages_to_install: Sequence[str] | None,
    pip_index_url: str,
    env_vars: Any,
) -> dict[str, Any]:
    """The PyTorchJob (Master 1, Worker `num_workers - 1`) or TFJob (Chief, PS, Worker) whose
    replicas all run `train_func` (or `base_image`'s own command), as upstream builds it."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"At least one Worker for {job_kind} must be set")
    if job_kind not in BASE_IMAGES:
        raise ValueError(
            f"Job kind {job_kind} can't be created using function or image. "
            "Number of Workers must be set."
        )
    container: dict[str, Any] = {
        "name": CONTAINERS[job_kind],
        "image": base_image or BASE_IMAGES[job_kind],
    }
    if train_func is not None:
        if not callable(train_func):
            raise ValueError(
                f"Training function must be callable, got function type: {type(train_func)}"
            )
        if isinstance(packages_to_install, str):
            packages_to_install = [packages_to_install]
        torchrun = job_kind == PYTORCHJOB_KIND and (
            num_workers > 1 or num_procs_per_worker is not None
        )
        container["command"], container["args"] = function_command(
            train_func,
            parameters,
            distributed=torchrun,
            packages_to_install=packages_to_install,
            pip_index_url=pip_index_url,
        )
    if env_vars:
        container["env"] = _environment(env_vars)
    if resources_per_worker is not None:
        container["resources"] = _resources(resources_per_worker)
    template = {
        "metadata": {"annotations": {ISTIO_SIDECAR_INJECTION: "false"}},
        "spec": {"containers": [container]},
    }

    def replicas(count: int) -> dict[str, Any]:
        return {"replicas": count, "template": copy.deepcopy(template)}

    spec: dict[str, Any] = {"runPolicy": {}}
    if job_kind == TFJOB_KIND:
        if num_procs_per_worker is not None:
            raise ValueError(f"num_procs_per_worker can't be set for {TFJOB_KIND}")
        specs: dict[str, Any] = {}
        if num_chief_replicas is not None:
            specs["Chief"] = replicas(num_chief_replicas)
        if num_ps_replicas is not None:
            specs["PS"] = replicas(num_ps_replicas)
        specs["Worker"] = replicas(num_workers)
        spec["tfReplicaSpecs"] = specs
    else:
        if num_chief_replicas is not None or num_ps_replicas is not None:
            raise ValueError(
                f"num_chief_replicas and num_ps_replicas can't be set for {PYTORCHJOB_KIND}"
            )
        if num_procs_per_worker:
            spec["nprocPerNode"] = str(num_procs_per_worker)
        specs = {"Master": replicas(1)}
        if num_workers > 1:
            specs["Worker"] = replicas(num_workers - 1)
        spec["pytorchReplicaSpecs"] = specs
    return {
        "apiVersion": API_VERSION,
        "kind": job_kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _environment(env_vars: Any) -> list[Any]:
    """A dict of names to values, or a list of `V1EnvVar`s (or of their keyword arguments)."""
    if isinstance(env_vars, Mapping):
        return [{"name": str(k), "value": str(v)} for k, v in env_vars.items()]
    if isinstance(env_vars, list | tuple):
        return [to_document(V1EnvVar(**v) if isinstance(v, Mapping) else v) for v in env_vars]
    raise ValueError(f"env_vars: a dict or a list of V1EnvVar (got {type(env_vars).__name__})")


def _resources(resources: Any) -> Any:
    """A dict of `cpu`, `memory`, `gpu` (`nvidia.com/gpu`) amounts as requests and limits, or
    a `V1ResourceRequirements` as it is."""
    if isinstance(resources, Mapping):
        if not all(isinstance(k, str) for k in resources):
            raise ValueError(f"resources_per_worker: resource names as keys (got {resources!r})")
        amounts = container_resources(resources)
        return {"requests": amounts, "limits": dict(amounts)}
    return to_document(resources)


def job_source(job: Any) -> dict[str, Any]:
    """A job given to `create_job`: a model (trainhub's, kubeflow's) or a document, without
    what the apiserver would set itself (uid, creation time, status)."""
    document = to_document(job)
    if not isinstance(document, dict):
        raise ValueError(f"Job must be one of these types: {list(JOB_MODELS)} or a document")
    document = copy.deepcopy(document)
    document.pop("status", None)
    metadata = document.get("metadata")
    if isinstance(metadata, dict):
        for key in _SERVER_METADATA:
            metadata.pop(key, None)
    return document


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the apiserver applies `update_job`'s object: maps merge, None removes."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


# -- what the client returns -----------------------------------------------------------------


def job_object(job: TrainHubJob, job_kind: str) -> Any:
    """The job as its kind's model: the document as submitted (or last updated), with
    `metadata.uid` trainhub's uid, `metadata.creation_timestamp` and the status the status topic
    holds. A job the hub rejected has a `Failed` condition, as `is_job_failed` says.
    `job_kind`: the kind of a job whose document the status topic no longer holds."""
    document: dict[str, Any] = copy.deepcopy(job.spec) if job.spec else {}
    document.setdefault("apiVersion", API_VERSION)
    document.setdefault("kind", job.kind or job_kind)
    metadata = document.setdefault("metadata", {})
    metadata.setdefault("name", job.name)
    metadata.setdefault("namespace", job.namespace)
    metadata["uid"] = job.uid
    if job.created is not None:
        metadata["creationTimestamp"] = job.created.isoformat()
    status = job.status.model_dump(mode="json", exclude_none=True)
    present = {c.type for c in job.status.conditions if c.status == "True"}
    for ctype in ConditionType:
        if ctype.value not in present and job.has_condition(ctype):
            condition = KubeflowOrgV1JobCondition(
                type=ctype.value,
                status="True",
                reason=job.reason,
                message=job.message,
                last_transition_time=job.updated,
                last_update_time=job.updated,
            )
            status.setdefault("conditions", []).append(to_document(condition))
    document["status"] = status
    return from_document(document)


def pod_objects(job: TrainHubJob | None, pods: Sequence[JobPod]) -> list[V1Pod]:
    """The pods of a job placed on a cluster (none while it waits, is suspended or gone, as
    the apiserver would list none), with their name, namespace and labels, their node
    (`spec.node_name`) where known, and their `status` (`phase`, `start_time`, `reason`,
    `message`) as the worker of their cluster told it: None when it did not answer."""
    if job is None or job.cluster is None or job.phase in _NO_PODS:
        return []
    return [
        V1Pod(
            api_version="v1",
            kind="Pod",
            metadata=V1ObjectMeta(name=p.name, namespace=p.namespace, labels=dict(p.labels)),
            spec=V1PodSpec(node_name=p.node_name) if p.node_name is not None else None,
            status=_pod_status(p),
        )
        for p in pods
    ]


def _pod_status(pod: JobPod) -> V1PodStatus | None:
    if pod.phase is None:
        return None
    return V1PodStatus(
        phase=pod.phase, start_time=pod.start_time, reason=pod.reason, message=pod.message
    )


def job_events(job: TrainHubJob, job_kind: str) -> dict[str, list[str]]:
    """`get_job_logs(verbose=True)`'s events: the job's status history as
    `{"<kind>/<name>": ["<time> <what happened>"]}` (pod events are not on the bus)."""
    lines = []
    for event in job.events:
        what = [event.phase.value]
        if event.cluster:
            what.append(f"on {event.cluster}")
        text = " ".join(what)
        reason = event.reason if event.reason != event.phase.value else None
        detail = ": ".join(x for x in (reason, event.message) if x)
        stamp = event.time.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"{stamp} {text}" + (f" ({detail})" if detail else ""))
    return {f"{job_kind.lower()}/{job.name}": lines} if lines else {}
