"""Job documents of every kind for the runtime tests: replica counts, restart policies, a
runPolicy, and the sim annotations that say how long each pod runs and how it exits."""

from __future__ import annotations

from typing import Any

from schemas.job_parsing import parse_job
from schemas.kubeflow import AnyJob
from schemas.sim_annotations import SIM_DURATION, SIM_EXIT_CODE
from schemas.status import JobPhase
from workers.job_run import JobRun
from workers.rendering import RenderedJob, render_job

KINDS: dict[str, tuple[str, str]] = {
    "TFJob": ("tfReplicaSpecs", "tensorflow"),
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch"),
    "XGBoostJob": ("xgbReplicaSpecs", "xgboost"),
    "MPIJob": ("mpiReplicaSpecs", "mpi"),
    "PaddleJob": ("paddleReplicaSpecs", "paddle"),
    "JAXJob": ("jaxReplicaSpecs", "jax"),
}


def replica(
    replicas: int = 1,
    *,
    restart_policy: str | None = None,
    duration: str = "0.2s",
    exit_code: int | None = None,
    cpu: str = "100m",
    command: list[str] | None = None,
    container: str | None = None,
) -> dict[str, Any]:
    annotations = {SIM_DURATION: duration}
    if exit_code is not None:
        annotations[SIM_EXIT_CODE] = str(exit_code)
    spec: dict[str, Any] = {
        "replicas": replicas,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {
                "containers": [
                    {
                        "name": container or "main",
                        "image": "example/train:1",
                        "command": command or ["python", "-c", "pass"],
                        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                    }
                ]
            },
        },
    }
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return spec


def job_document(
    kind: str,
    name: str,
    replicas: dict[str, dict[str, Any]],
    *,
    run_policy: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    field, container = KINDS[kind]
    for rspec in replicas.values():
        rspec["template"]["spec"]["containers"][0]["name"] = container
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runPolicy": {"managedBy": "trainhub.io/dispatcher", **(run_policy or {})},
            field: replicas,
            **spec,
        },
    }


def rendered(document: dict[str, Any]) -> RenderedJob:
    job: AnyJob = parse_job(document)
    return render_job(job)


def phase_of(run: JobRun) -> JobPhase:
    """The run's phase, read afresh: mypy keeps the narrowing of `run.phase` from an earlier
    comparison across the calls that change it, and then takes a later check for impossible."""
    return run.phase
