"""`TrainerClient`: Kubeflow Trainer v2's Python SDK client (`kubeflow.trainer.TrainerClient`)
over trainhub's bus, for TrainJobs.

The methods, parameter names, defaults, return types and errors are upstream's, so a script
written for it runs with the import and the construction changed: runtimes come from the
catalog trainhub's hub and workers know (the shipped ones and `TRAINHUB_RUNTIMES`), jobs from
the status topic, logs from the worker of the job's cluster. A bad argument is a `ValueError`,
a call that cannot be answered a `RuntimeError`, one that takes too long a `TimeoutError`."""

from __future__ import annotations

import asyncio
import logging
import random
import string
import time
import uuid
from collections.abc import Coroutine, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from bus.base import BusError
from schemas.job_parsing import parse_placed_job
from schemas.status import ConditionType, JobPhase
from schemas.trainer import AnyRuntime, RuntimeRef
from schemas.trainer_runtimes import RuntimeCatalog, parse_runtime, runtime_catalog
from trainhub.sdk import TrainHubClient
from trainhub.sdk_errors import LogsUnavailableError, TrainHubError
from trainhub.sdk_functions import container_resources, function_command
from trainhub.sdk_view import TrainHubJob
from trainhub.settings import TrainhubSettings
from trainhub.trainer_torchtune import builtin_trainer_spec
from trainhub.trainer_types import (
    DATASET_INITIALIZER,
    DEFAULT_RUNTIME_NAME,
    LAUNCHER,
    MODEL_INITIALIZER,
    MPI_ENTRYPOINT,
    MPI_HOSTFILE,
    NODE,
    TORCH_ENTRYPOINT,
    TORCHTUNE_COMMAND,
    TRAINJOB_COMPLETE,
    TRAINJOB_CREATED,
    TRAINJOB_FAILED,
    TRAINJOB_RUNNING,
    TRAINJOB_STATUSES,
    UNKNOWN,
    BuiltinTrainer,
    CustomTrainer,
    Framework,
    Initializer,
    Runtime,
    Step,
    Trainer,
    TrainerType,
    TrainJob,
)
from workers.rendering import PodPlan, render_job

log = logging.getLogger("trainhub.trainer_client")

_T = TypeVar("_T")

TRAINJOB_KIND = "TrainJob"
API_VERSION = "trainer.kubeflow.org/v1alpha1"
CLUSTER_RUNTIME_KIND = "ClusterTrainingRuntime"
DEFAULT_TIMEOUT = 120.0
"""Seconds any one read or write through the bus may take (upstream's apiserver calls')."""
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ACCELERATOR_LABEL = "trainer.kubeflow.org/accelerator"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
TORCHTUNE_IMAGE = "ghcr.io/kubeflow/trainer/torchtune-trainer"
"""A runtime is torchtune's (a BuiltinTrainer's) by its trainer image, as the SDK's last
revision in kubeflow/trainer tells it, or by the framework label v2.1.0's runtimes carry."""
_DEVICES = (("nvidia.com/gpu", "gpu"), ("google.com/tpu", "tpu"), ("cpu", "cpu"))
"""Resource limit -> the device a step or runtime reports, first found wins."""
_NO_PODS = frozenset({JobPhase.QUEUED, JobPhase.SUSPENDED, JobPhase.REJECTED, JobPhase.SKIPPED})


def _trainjob_name() -> str:
    """A fresh DNS-1123 name: a letter, then 11 hex digits."""
    return random.choice(string.ascii_lowercase) + uuid.uuid4().hex[:11]


def _device(resources: dict[str, Any] | None) -> tuple[str, str] | None:
    limits = (resources or {}).get("limits") or {}
    for resource, device in _DEVICES:
        if resource in limits:
            return device, str(limits[resource])
    return None


def _image_name(image: str) -> str:
    """The image without its tag or digest."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def _number(text: str) -> int | float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else value


def runtime_view(runtime: AnyRuntime) -> Runtime:
    """Upstream's `Runtime` of a (Cluster)TrainingRuntime: the framework its ML policy names
    (torchtune's, a BuiltinTrainer's, by its trainer image or framework label), the
    entrypoint a function runs under there, and its trainer nodes' accelerators."""
    document = runtime.model_dump(mode="json", exclude_none=True)
    spec = document.get("spec") or {}
    policy = spec.get("mlPolicy") or {}
    jobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
    labels = (document.get("metadata") or {}).get("labels") or {}
    builtin = labels.get(FRAMEWORK_LABEL) == Framework.TORCHTUNE.value or any(
        _image_name(str(c.get("image", ""))) == TORCHTUNE_IMAGE for c in _trainer_nodes(jobs)
    )
    trainer_type = TrainerType.BUILTIN_TRAINER if builtin else TrainerType.CUSTOM_TRAINER
    if builtin:
        framework, entrypoint = Framework.TORCHTUNE, list(TORCHTUNE_COMMAND)
    elif "torch" in policy:
        framework, entrypoint = Framework.TORCH, [TORCH_ENTRYPOINT]
    elif "mpi" in policy:
        framework = Framework.MPI
        entrypoint = [MPI_ENTRYPOINT, "--hostfile", MPI_HOSTFILE, "bash", "-c"]
    else:
        framework, entrypoint = Framework.PLAIN, ["python", "-u"]
    trainer = Trainer(trainer_type=trainer_type, framework=framework, entrypoint=entrypoint)
    for container in _trainer_nodes(jobs):
        if found := _device(container.get("resources")):
            trainer.accelerator_count = _number(found[1]) or found[1]
    processes = (policy.get("torch") or policy.get("mpi") or {}).get("numProcPerNode")
    if isinstance(processes, int) and not isinstance(processes, bool):
        trainer.accelerator_count = processes
    nodes = policy.get("numNodes")
    if isinstance(trainer.accelerator_count, int | float) and isinstance(nodes, int):
        trainer.accelerator_count *= nodes
    if ACCELERATOR_LABEL in labels:
        trainer.accelerator = labels[ACCELERATOR_LABEL]
    return Runtime(name=runtime.metadata.name, trainer=trainer)


def _trainer_nodes(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `node` containers of the replicated jobs an ancestor label marks (upstream's
    trainer container)."""
    found = []
    for job in jobs:
        template = job.get("template") or {}
        if ANCESTOR_LABEL not in ((template.get("metadata") or {}).get("labels") or {}):
            continue
        pod = ((template.get("spec") or {}).get("template") or {}).get("spec") or {}
        found += [c for c in pod.get("containers") or [] if c.get("name") == NODE]
    return found


def trainjob_status(job: TrainHubJob) -> str:
    """Upstream's word for where a TrainJob is: Complete or Failed from its conditions (a job
    the hub rejected is Failed), Running while its pods run, else Created."""
    if job.has_condition(ConditionType.COMPLETE):
        return TRAINJOB_COMPLETE
    if job.has_condition(ConditionType.FAILED):
        return TRAINJOB_FAILED
    if job.phase in (JobPhase.RUNNING, JobPhase.RESTARTING):
        return TRAINJOB_RUNNING
    return TRAINJOB_CREATED


def _step_status(job: TrainHubJob, replicated_job: str, pods: int) -> str | None:
    """The phase of a replicated job's pods where its counts say it for all of them (for a
    step whose pod's own phase is unknown); a replicated job whose pods differ says None."""
    counts = job.status.replicaStatuses.get(replicated_job)
    active, succeeded, failed = (
        (counts.active, counts.succeeded, counts.failed) if counts else (0, 0, 0)
    )
    if succeeded == pods:
        return "Succeeded"
    if failed == pods:
        return "Failed"
    if active == pods:
        return "Running"
    if active + succeeded + failed == 0 and not job.finished:
        return "Pending"
    return None


def job_steps(job: TrainHubJob, phases: Mapping[str, str] | None = None) -> list[Step]:
    """A step per pod of the job's current run, as every worker names its pods: initializers
    by their replicated job's name, trainer nodes `node-<rank>` (with MPI's launcher node-0).
    A step's status is its pod's phase in `phases` (pod name -> phase, as its worker told
    it), else what its replicated job's counts say."""
    phases = phases or {}
    if job.spec is None or job.cluster is None or job.phase in _NO_PODS | {JobPhase.DELETED}:
        return []
    plans = render_job(parse_placed_job(job.spec, job.runtime), attempt=max(job.attempt, 1)).pods
    sizes: dict[str, int] = {}
    for plan in plans:
        sizes[plan.replica_type] = sizes.get(plan.replica_type, 0) + 1
    has_launcher = LAUNCHER in sizes
    steps = []
    for plan in plans:
        if plan.replica_type in (DATASET_INITIALIZER, MODEL_INITIALIZER):
            name = plan.replica_type
        elif plan.replica_type == LAUNCHER:
            name = f"{NODE}-0"
        else:
            name = f"{NODE}-{plan.index + 1 if has_launcher else plan.index}"
        step = Step(
            name=name,
            status=phases.get(plan.name)
            or _step_status(job, plan.replica_type, sizes[plan.replica_type]),
            pod_name=plan.name,
        )
        _set_device(step, plan)
        steps.append(step)
    return steps


def _set_device(step: Step, plan: PodPlan) -> None:
    pod = plan.spec.model_dump(mode="json", exclude_none=True)
    container = next(
        (c for c in pod.get("containers") or [] if c.get("name") == plan.default_container),
        None,
    ) or next(iter(pod.get("containers") or []), None)
    if container is None:
        return
    if found := _device(container.get("resources")):
        step.device, step.device_count = found
    for variable in container.get("env") or []:
        value = variable.get("value")
        if variable.get("name") == "PET_NPROC_PER_NODE" and isinstance(value, str):
            if value.isdigit():
                step.device_count = value


def _check_trainer(trainer: object, runtime: Runtime) -> None:
    """A trainer upstream takes, on a runtime of its type: the type check, with its words, is
    kubeflow/sdk's (the SDK's home after it left kubeflow/trainer; the client that added
    `wait_for_job_status`), the revision before it had none."""
    if trainer is None:
        return
    if not isinstance(trainer, CustomTrainer | BuiltinTrainer):
        raise ValueError(
            f"The trainer type {type(trainer)} is not supported. "
            "Please use CustomTrainer or BuiltinTrainer."
        )
    wanted = (
        TrainerType.CUSTOM_TRAINER
        if isinstance(trainer, CustomTrainer)
        else TrainerType.BUILTIN_TRAINER
    )
    if runtime.trainer.trainer_type != wanted:
        raise ValueError(f"{type(trainer).__name__} can't be used with {runtime} runtime")


async def _within(coro: Coroutine[Any, Any, _T], timeout: float) -> _T:
    async with asyncio.timeout(timeout):
        return await coro


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{what}: seconds, more than 0 (got {value!r})")
    return float(value)


class TrainerClient:
    """Kubeflow Trainer v2's `TrainerClient`, reaching TrainJobs through trainhub's bus
    instead of an apiserver. Connection settings are `TrainHubClient`'s (`bootstrap`,
    `topic_prefix`, `config`, `settings`, `TRAINHUB_*`), or pass `client`, a `TrainHubClient`
    to share (never closed here). `namespace` is where its TrainJobs are (`default`);
    `close()` (or `with`) releases a connection the client made."""

    def __init__(
        self,
        bootstrap: str | None = None,
        topic_prefix: str | None = None,
        *,
        namespace: str | None = None,
        config: str | Path | None = None,
        settings: TrainhubSettings | None = None,
        client: TrainHubClient | None = None,
        config_file: str | None = None,
        context: str | None = None,
        client_configuration: object | None = None,
        **overrides: Any,
    ) -> None:
        kube: dict[str, object] = {"config_file": config_file, "context": context}
        kube["client_configuration"] = client_configuration
        given = [k for k, v in kube.items() if v is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)}: trainhub reaches TrainJobs through its bus, not a "
                "kube-config; pass bootstrap=, config= (trainhub's settings file) or settings="
            )
        self.namespace = namespace or "default"
        if client is None:
            client = TrainHubClient(
                bootstrap,
                topic_prefix,
                config=config,
                settings=settings,
                namespace=self.namespace,
                **overrides,
            )
            self._owns = True
        elif bootstrap or topic_prefix or config or settings or overrides:
            raise ValueError("pass either client or connection settings, not both")
        else:
            self._owns = False
        self.hub = client
        """The `TrainHubClient` underneath: uids, clusters, queues, status streams."""

    def close(self) -> None:
        if self._owns:
            self.hub.close()

    def __enter__(self) -> TrainerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, _T], subject: str) -> _T:
        try:
            return self.hub.run_on_loop(_within(coro, DEFAULT_TIMEOUT))
        except TimeoutError as exc:
            raise TimeoutError(f"Timeout to {subject}") from exc
        except (TrainHubError, BusError) as exc:
            raise RuntimeError(f"Failed to {subject}: {exc}") from exc

    def _find(self, name: str, action: str = "get") -> TrainHubJob:
        """The TrainJob of that name in the client's namespace, not deleted."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"name: a TrainJob's name (got {name!r})")
        subject = f"{action} {TRAINJOB_KIND}: {self.namespace}/{name}"
        job = self._run(self.hub.aio.get_job(name, self.namespace), subject)
        if job.phase == JobPhase.DELETED:
            raise RuntimeError(f"Failed to {subject}: it was deleted")
        if job.kind is not None and job.kind != TRAINJOB_KIND:
            raise RuntimeError(f"Failed to {subject}: the job of that name is a {job.kind}")
        return job

    def _trainjob(self, job: TrainHubJob, phases: Mapping[str, str] | None = None) -> TrainJob:
        spec = (job.spec or {}).get("spec") or {}
        ref = RuntimeRef.model_validate(spec.get("runtimeRef") or {"name": UNKNOWN})
        placed = job.runtime
        found = (
            parse_runtime(placed, "the job's runtime")
            if placed is not None
            else runtime_catalog().find(ref, job.namespace or self.namespace)
        )
        runtime = (
            runtime_view(found)
            if found is not None
            else Runtime(
                name=ref.name,
                trainer=Trainer(TrainerType.CUSTOM_TRAINER, Framework.PLAIN),
            )
        )
        return TrainJob(
            name=job.name or job.uid,
            creation_timestamp=job.created or job.updated or datetime.now(UTC),
            runtime=runtime,
            steps=job_steps(job, phases),
            status=trainjob_status(job),
        )

    # -- runtimes -------------------------------------------------------------------------

    def list_runtimes(self) -> list[Runtime]:
        """The ClusterTrainingRuntimes trainhub knows: the shipped ones (torch-distributed,
        mpi-distributed, plain-distributed, torchtune-llama3.2-1b and -3b), operators' files
        (`TRAINHUB_RUNTIMES`) and those applied on the bus (`trainhub runtime apply`), by
        name."""
        catalog = self._runtimes(f"list {CLUSTER_RUNTIME_KIND}s")
        return [runtime_view(r) for r in catalog.runtimes() if r.kind == CLUSTER_RUNTIME_KIND]

    def get_runtime(self, name: str) -> Runtime:
        """The ClusterTrainingRuntime of that name; `RuntimeError` when none is known."""
        subject = f"get {CLUSTER_RUNTIME_KIND}: {name}"
        catalog = self._runtimes(subject)
        found = catalog.find(RuntimeRef(name=name), self.namespace)
        if found is None:
            raise RuntimeError(f"Failed to {subject} (known runtimes: {catalog.known_text()})")
        return runtime_view(found)

    def _runtimes(self, subject: str) -> RuntimeCatalog:
        """This process's runtimes with the bus's (the runtimes topic, read to its end)."""
        return self._run(self.hub.aio.runtimes(), subject)

    # -- TrainJobs ------------------------------------------------------------------------

    def train(
        self,
        runtime: Runtime | None = None,
        initializer: Initializer | None = None,
        trainer: CustomTrainer | BuiltinTrainer | None = None,
    ) -> str:
        """Create a TrainJob on `runtime` (torch-distributed by default) and return its
        generated name. A `CustomTrainer` runs a function on every node (under torchrun on a
        torch runtime, mpirun on an MPI one); a `BuiltinTrainer` runs the torchtune runtime's
        fine-tune with its `TorchTuneConfig` (`tune run` and the config as overrides); each
        only on a runtime of its trainer type. Without one the runtime's own command runs.
        `initializer` fetches a dataset and a model (Hugging Face `hf://` URIs, or trainhub's
        local, PVC and HTTP ones) first, on a runtime that has those initializers."""
        if runtime is None:
            runtime = self.get_runtime(DEFAULT_RUNTIME_NAME)
        if not isinstance(runtime, Runtime):
            raise ValueError(f"runtime: a Runtime from list_runtimes() (got {runtime!r})")
        _check_trainer(trainer, runtime)
        if initializer is not None and not isinstance(initializer, Initializer):
            raise ValueError(f"initializer: an Initializer (got {initializer!r})")
        name = _trainjob_name()
        spec: dict[str, Any] = {"runtimeRef": {"name": runtime.name}}
        if isinstance(trainer, BuiltinTrainer):
            spec["trainer"] = builtin_trainer_spec(trainer, initializer)
        elif trainer is not None:
            spec["trainer"] = self._trainer_spec(trainer, runtime)
        if initializer is not None and (initializer.dataset or initializer.model):
            spec["initializer"] = {
                role: self._initializer_spec(source.storage_uri, source.access_token)
                for role, source in (("dataset", initializer.dataset), ("model", initializer.model))
                if source is not None
            }
        document = {
            "apiVersion": API_VERSION,
            "kind": TRAINJOB_KIND,
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
        }
        self._run(
            self.hub.aio.create_job(document),
            f"create {TRAINJOB_KIND}: {self.namespace}/{name}",
        )
        log.debug("%s %s/%s has been created", TRAINJOB_KIND, self.namespace, name)
        return name

    @staticmethod
    def _trainer_spec(trainer: CustomTrainer, runtime: Runtime) -> dict[str, Any]:
        framework = runtime.trainer.framework
        command, args = function_command(
            trainer.func,
            trainer.func_args,
            distributed=framework == Framework.TORCH,
            packages_to_install=trainer.packages_to_install,
            pip_index_url=trainer.pip_index_url,
        )
        if framework == Framework.MPI and runtime.trainer.entrypoint:
            command = list(runtime.trainer.entrypoint)  # mpirun ... bash -c SCRIPT
        spec: dict[str, Any] = {"command": command, "args": args}
        if trainer.num_nodes is not None:
            spec["numNodes"] = trainer.num_nodes
        if trainer.resources_per_node:
            amounts = container_resources(trainer.resources_per_node)
            spec["resourcesPerNode"] = {"requests": amounts, "limits": dict(amounts)}
        return spec

    @staticmethod
    def _initializer_spec(storage_uri: str, access_token: str | None) -> dict[str, Any]:
        source: dict[str, Any] = {"storageUri": storage_uri}
        if access_token:
            source["env"] = [{"name": "ACCESS_TOKEN", "value": access_token}]
        return source

    def list_jobs(self, runtime: Runtime | None = None) -> list[TrainJob]:
        """The namespace's TrainJobs not deleted (of `runtime` only, when given). Their steps'
        status is what the replica counts say: asking each job's worker is `get_job`'s."""
        subject = f"list {TRAINJOB_KIND}s in namespace: {self.namespace}"
        jobs = self._run(self.hub.aio.list_jobs(self.namespace), subject)
        found = []
        for job in jobs:
            if job.kind != TRAINJOB_KIND:
                continue
            view = self._trainjob(job)
            if runtime is None or view.runtime.name == runtime.name:
                found.append(view)
        return found

    def get_job(self, name: str) -> TrainJob:
        """The TrainJob: its runtime, status and steps (one per pod, its status the pod's
        phase as the worker of the job's cluster tells it)."""
        job = self._find(name)
        return self._trainjob(job, self._pod_phases(job))

    def _pod_phases(self, job: TrainHubJob) -> dict[str, str]:
        """Pod name -> phase, for the pods whose phase the worker of the job's cluster knows
        (none when it does not answer within a few seconds, or the job has no steps)."""
        if job.spec is None or job.cluster is None or job.phase in _NO_PODS | {JobPhase.DELETED}:
            return {}
        subject = f"list {TRAINJOB_KIND}'s steps: {self.namespace}/{job.name}"
        pods = self._run(self.hub.aio.get_job_pods(job.uid), subject)
        return {p.name: p.phase for p in pods if p.phase is not None and p.phase != "Unknown"}

    def get_job_logs(
        self,
        name: str,
        follow: bool | None = False,
        step: str = NODE,
        node_rank: int = 0,
    ) -> dict[str, str]:
        """The logs of one step: `{"node-0": text}` for trainer node `node_rank`, or
        `{"dataset-initializer": text}`; empty while that pod is pending or not made yet.
        With `follow`, its lines are printed as they come and the logs returned once the
        job finished."""
        steps = self.get_job(name).steps
        wanted = {step, f"{step}-{node_rank}"}
        chosen = next((s for s in steps if s.name in wanted and s.status != "Pending"), None)
        if chosen is None:
            return {}
        key = step if step in (DATASET_INITIALIZER, MODEL_INITIALIZER) else f"{step}-{node_rank}"
        subject = f"read logs for the pod {self.namespace}/{chosen.pod_name}"
        text = ""
        try:
            if follow:
                for chunk in self.hub.stream_job_logs(
                    name, self.namespace, follow=True, pod=chosen.pod_name
                ):
                    for line in chunk.text.splitlines():
                        print(f"[{key}]: {line}")
                    text += chunk.text
            else:
                logs = self._run(
                    self.hub.aio.get_job_logs(name, self.namespace, pod=chosen.pod_name),
                    subject,
                )
                text = logs.get(chosen.pod_name, "")
        except LogsUnavailableError as exc:
            raise RuntimeError(f"Failed to {subject}: {exc}") from exc
        return {key: text}

    def wait_for_job_status(
        self,
        name: str,
        status: Iterable[str] = frozenset({TRAINJOB_COMPLETE}),
        timeout: float = 600,
        polling_interval: float = 2,
    ) -> TrainJob:
        """Wait until the TrainJob's status is one of `status` (Created, Running, Complete,
        Failed) and return it. `RuntimeError` when it fails and Failed was not waited for,
        `TimeoutError` after `timeout` seconds."""
        wanted = {status} if isinstance(status, str) else set(status)
        if not wanted or not wanted <= TRAINJOB_STATUSES:
            raise ValueError(
                f"Expected status {sorted(wanted)} must be a subset of {sorted(TRAINJOB_STATUSES)}"
            )
        limit = _seconds(timeout, "timeout")
        interval = _seconds(polling_interval, "polling_interval")
        if interval > limit:
            raise ValueError(f"polling_interval ({polling_interval}) exceeds timeout ({timeout})")
        deadline = time.monotonic() + limit
        while True:
            # Polled from the status topic alone: asking the worker for its pods' phases at
            # every poll would cost a round trip (seconds with the worker down) for nothing.
            job = self._trainjob(self._find(name))
            if job.status in wanted:
                return self.get_job(name)
            if job.status == TRAINJOB_FAILED:
                raise RuntimeError(f"{TRAINJOB_KIND} {self.namespace}/{name} is Failed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"Timeout waiting for {TRAINJOB_KIND} {self.namespace}/{name} to reach "
                    f"status: {sorted(wanted)} (it is {job.status})"
                )
            time.sleep(min(interval, remaining))

    def delete_job(self, name: str) -> None:
        """Delete the TrainJob wherever it runs."""
        job = self._find(name, "delete")
        self._run(
            self.hub.aio.delete_job(job.uid), f"delete {TRAINJOB_KIND}: {self.namespace}/{name}"
        )
        log.debug("%s %s/%s has been deleted", TRAINJOB_KIND, self.namespace, name)
