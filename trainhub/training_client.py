"""`TrainingClient`: Kubeflow's `TrainingClient` (kubeflow-training 1.9) over trainhub's bus.

The methods, their positional order, parameter names and defaults, return types and errors
are upstream's, so a script written for it runs with the import and the construction changed:
job objects are the models of `trainhub.training_models` (exported here under upstream's
names), `get_job_logs` returns `(logs, events)`, a job that cannot be read is a
`RuntimeError`, a timeout a `TimeoutError` and a bad argument a `ValueError`. It runs on a
`TrainHubClient` (the richer API: uids, clusters, queues, streams), which `hub` holds."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainhub.sdk import TrainHubClient
from trainhub.settings import TrainhubSettings
from trainhub.training_documents import to_document
from trainhub.training_following import TrainingFollowing
from trainhub.training_jobs import (
    DEFAULT_PIP_INDEX_URL,
    DEFAULT_TIMEOUT,
    PYTORCHJOB_KIND,
    check_kind,
    function_job,
    has_condition,
    job_object,
    job_source,
    merge_patch,
)
from trainhub.training_models import *  # noqa: F403 - upstream's names, as kubeflow.training's
from trainhub.training_models import JOB_MODELS

log = logging.getLogger(__name__)


class TrainingClient(TrainingFollowing):
    """Kubeflow's `TrainingClient`, reaching jobs through trainhub's bus instead of an
    apiserver. Connection settings are `TrainHubClient`'s (`bootstrap`, `topic_prefix`,
    `config`, `settings`, `TRAINHUB_*`), or pass `client`, a `TrainHubClient` to share (the
    TrainingClient then never closes it). `namespace` and `job_kind` are upstream's defaults
    for every call; `close()` (or `with`) releases a connection the client made."""

    def __init__(
        self,
        bootstrap: str | None = None,
        topic_prefix: str | None = None,
        *,
        namespace: str = "default",
        job_kind: str = PYTORCHJOB_KIND,
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
                f"{', '.join(given)}: trainhub reaches jobs through its bus, not a kube-config; "
                "pass bootstrap=, config= (trainhub's settings file) or settings="
            )
        self.job_kind = check_kind(job_kind)
        self.namespace = namespace
        if client is None:
            client = TrainHubClient(
                bootstrap,
                topic_prefix,
                config=config,
                settings=settings,
                namespace=namespace,
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

    def __enter__(self) -> TrainingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- creating and changing ------------------------------------------------------------

    def create_job(
        self,
        job: Any = None,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        base_image: str | None = None,
        train_func: Callable[..., Any] | None = None,
        parameters: dict[str, Any] | None = None,
        num_workers: int | None = 1,
        num_procs_per_worker: int | str | None = None,
        resources_per_worker: Any = None,
        num_chief_replicas: int | None = None,
        num_ps_replicas: int | None = None,
        packages_to_install: list[str] | None = None,
        pip_index_url: str = DEFAULT_PIP_INDEX_URL,
        env_vars: Mapping[str, str] | Sequence[Any] | None = None,
    ) -> None:
        """Create a job from `job` (a job model, kubeflow's or trainhub's, or its document),
        or from `train_func` or `base_image` with `name`: a PyTorchJob (Master 1, Worker
        `num_workers - 1`, under `torchrun` when distributed) or a TFJob (`num_chief_replicas`
        Chief, `num_ps_replicas` PS, `num_workers` Worker), as upstream's. An unset
        `runPolicy.managedBy` becomes trainhub's."""
        if job is not None:
            others = {
                "name": name,
                "job_kind": job_kind,
                "base_image": base_image,
                "train_func": train_func,
                "parameters": parameters,
                "num_procs_per_worker": num_procs_per_worker,
                "resources_per_worker": resources_per_worker,
                "num_chief_replicas": num_chief_replicas,
                "num_ps_replicas": num_ps_replicas,
                "packages_to_install": packages_to_install,
                "env_vars": env_vars,
            }
            for key, value in others.items():
                if value is not None:
                    raise ValueError(
                        "If `job` is set only `namespace` argument is allowed. "
                        f"Argument `{key}` must be None."
                    )
            document = job_source(job)
            kind = check_kind(document.get("kind"))
            model = JOB_MODELS[kind]
            if not isinstance(job, Mapping) and type(job).__name__ != model.__name__:
                raise ValueError(f"Job must be a {model.__name__}, but Job is: {type(job)}")
            metadata = document.setdefault("metadata", {})
            if namespace is not None or not metadata.get("namespace"):
                metadata["namespace"] = namespace or self.namespace
        elif train_func is not None or base_image is not None:
            if name is None:
                raise ValueError("Job name must be set to configure Job from function or image")
            kind = check_kind(job_kind or self.job_kind)
            document = function_job(
                job_kind=kind,
                name=name,
                namespace=namespace or self.namespace,
                train_func=train_func,
                parameters=parameters,
                base_image=base_image,
                num_workers=num_workers,
                num_procs_per_worker=num_procs_per_worker,
                resources_per_worker=resources_per_worker,
                num_chief_replicas=num_chief_replicas,
                num_ps_replicas=num_ps_replicas,
                packages_to_install=packages_to_install,
                pip_index_url=pip_index_url,
                env_vars=env_vars,
            )
        else:
            raise ValueError(
                f"Job must be one of these types: {[m.__name__ for m in JOB_MODELS.values()]}; "
                "or pass name with train_func or base_image"
            )
        metadata = document["metadata"]
        subject = f"create {kind}: {metadata.get('namespace')}/{metadata.get('name')}"
        self._run(
            lambda: self.hub.aio.create_job(document), DEFAULT_TIMEOUT, subject, refusals=True
        )
        log.debug("%s %s/%s has been created", kind, metadata.get("namespace"), metadata["name"])

    def update_job(
        self,
        job: Any,
        name: str,
        namespace: str | None = None,
        job_kind: str | None = None,
    ) -> None:
        """Apply `job` (a model or a document, whole or partial) to the job as a merge patch,
        as upstream's `patch_namespaced_custom_object`. trainhub changes a job's spec while it
        has no pods (queued, held or suspended); a running job may only be suspended."""
        namespace = namespace or self.namespace
        kind = check_kind(job_kind or self.job_kind)
        patch = job_source(job)
        current = self._find(name, namespace, kind, DEFAULT_TIMEOUT, "update")
        if current.spec is None:
            raise RuntimeError(
                f"Failed to update {kind}: {namespace}/{name}: the status topic no longer "
                "holds its document"
            )
        document = merge_patch(current.spec, patch)
        document["metadata"] = {**document.get("metadata", {}), "name": name}
        document["metadata"]["namespace"] = namespace
        subject = f"update {kind}: {namespace}/{name}"
        self._run(
            lambda: self.hub.aio.update_job(document), DEFAULT_TIMEOUT, subject, refusals=True
        )
        log.debug("%s %s/%s has been updated", kind, namespace, name)

    def delete_job(
        self,
        name: str,
        namespace: str | None = None,
        job_kind: str | None = None,
        delete_options: Any = None,
    ) -> None:
        """Delete the job wherever it runs. `delete_options` (a `V1DeleteOptions` or its
        document): `dry_run=["All"]` checks and deletes nothing, `preconditions.uid` must be
        the job's; the grace period and propagation policy are the workers' own."""
        namespace = namespace or self.namespace
        kind = check_kind(job_kind or self.job_kind)
        options = to_document(delete_options) if delete_options is not None else {}
        if not isinstance(options, Mapping):
            raise ValueError(f"delete_options: a V1DeleteOptions (got {delete_options!r})")
        dry_run = options.get("dryRun") or []
        if not isinstance(dry_run, list) or any(d != "All" for d in dry_run):
            raise ValueError(f'delete_options.dry_run: ["All"] or none (got {dry_run!r})')
        preconditions = options.get("preconditions") or {}
        if preconditions.get("resourceVersion") is not None:
            raise ValueError("delete_options.preconditions.resource_version: trainhub has none")
        job = self._find(name, namespace, kind, DEFAULT_TIMEOUT, "delete")
        subject = f"delete {kind}: {namespace}/{name}"
        uid = preconditions.get("uid")
        if uid is not None and uid != job.uid:
            raise RuntimeError(f"Failed to {subject}: precondition uid {uid} is not {job.uid}")
        if dry_run:
            return
        self._run(lambda: self.hub.aio.delete_job(job.uid), DEFAULT_TIMEOUT, subject)
        log.debug("%s %s/%s has been deleted", kind, namespace, name)

    # -- reading --------------------------------------------------------------------------

    def get_job(
        self,
        name: str,
        namespace: str | None = None,
        job_kind: str | None = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> Any:
        """The job as its kind's model (`.metadata`, `.spec`, `.status`, `to_dict()`)."""
        namespace = namespace or self.namespace
        kind = check_kind(job_kind or self.job_kind)
        return job_object(self._find(name, namespace, kind, timeout), kind)

    def list_jobs(
        self,
        namespace: str | None = None,
        job_kind: str | None = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> list[Any]:
        """The jobs of that kind in the namespace, not deleted."""
        namespace = namespace or self.namespace
        kind = check_kind(job_kind or self.job_kind)
        subject = f"list {kind}s in namespace: {namespace}"
        jobs = self._run(lambda: self.hub.aio.list_jobs(namespace), timeout, subject)
        return [job_object(j, kind) for j in jobs if j.kind == kind]

    def get_job_conditions(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> list[Any]:
        """The job's conditions (of `job`, a job object, when given), oldest first."""
        kind = check_kind(job_kind or self.job_kind)
        if job is not None:
            model = JOB_MODELS[kind]
            if type(job).__name__ != model.__name__:
                raise ValueError(f"Job must be a {model.__name__}, but Job is: {type(job)}")
        else:
            if name is None:
                raise ValueError("Job name must be set when Job object is not set")
            job = self.get_job(name, namespace, kind, timeout)
        if job.status is not None and job.status.conditions:
            return list(job.status.conditions)
        return []

    def is_job_created(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> bool:
        conditions = self.get_job_conditions(name, namespace, job_kind, job, timeout)
        return has_condition(conditions, "Created")

    def is_job_running(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> bool:
        conditions = self.get_job_conditions(name, namespace, job_kind, job, timeout)
        return has_condition(conditions, "Running")

    def is_job_restarting(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> bool:
        conditions = self.get_job_conditions(name, namespace, job_kind, job, timeout)
        return has_condition(conditions, "Restarting")

    def is_job_succeeded(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> bool:
        conditions = self.get_job_conditions(name, namespace, job_kind, job, timeout)
        return has_condition(conditions, "Succeeded")

    def is_job_failed(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = DEFAULT_TIMEOUT,
    ) -> bool:
        """True for a Failed condition, and for a job the hub rejected."""
        conditions = self.get_job_conditions(name, namespace, job_kind, job, timeout)
        return has_condition(conditions, "Failed")
