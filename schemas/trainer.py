"""Kubeflow Trainer v2 API types (`trainer.kubeflow.org/v1alpha1`, release v2.0.0): the parts of
TrainJob and (Cluster)TrainingRuntime, with upstream's CEL rules; fields we do not
interpret (a JobSet's network, failure policy, ...) pass through unchanged."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.job_meta import ObjectMeta
from schemas.pod import Container, EnvVar, PodTemplateSpec, ResourceRequirements, Toleration
from schemas.run_policy import TRAINHUB_MANAGER

TRAINER_API_VERSION = "trainer.kubeflow.org/v1alpha1"
TRAINJOB_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
TORCH_PROC_WORDS = ("auto", "cpu", "gpu")

# Names upstream gives the replicated jobs and containers of a runtime's JobSet.
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
LAUNCHER = "launcher"
NODE = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
_ANCESTOR_STEPS = frozenset({"trainer", DATASET_INITIALIZER, MODEL_INITIALIZER})


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class RuntimeRef(_Closed):
    name: str = Field(min_length=1, max_length=253)
    apiGroup: str | None = "trainer.kubeflow.org"
    kind: Literal["TrainingRuntime", "ClusterTrainingRuntime"] | None = "ClusterTrainingRuntime"


class LocalObjectReference(_Open):
    name: str | None = None


class AssetInitializer(_Closed):
    """DatasetInitializer and ModelInitializer have the same fields."""

    storageUri: str | None = None
    env: list[EnvVar] | None = None
    secretRef: LocalObjectReference | None = None


class Initializer(_Closed):
    dataset: AssetInitializer | None = None
    model: AssetInitializer | None = None


class Trainer(_Closed):
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    numNodes: int | None = Field(default=None, strict=True, ge=0, le=2**31 - 1)
    resourcesPerNode: ResourceRequirements | None = None
    numProcPerNode: int | str | None = Field(default=None, union_mode="left_to_right")


class TargetJob(_Closed):
    name: str = Field(min_length=1)


class ContainerOverride(_Closed):
    name: str = Field(min_length=1)
    env: list[EnvVar] | None = None
    volumeMounts: list[dict[str, Any]] | None = None


class PodSpecOverride(_Closed):
    targetJobs: list[TargetJob]
    serviceAccountName: str | None = None
    nodeSelector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    volumes: list[dict[str, Any]] | None = None
    initContainers: list[ContainerOverride] | None = None
    containers: list[ContainerOverride] | None = None
    schedulingGates: list[dict[str, Any]] | None = None


class TrainJobSpec(_Closed):
    runtimeRef: RuntimeRef
    initializer: Initializer | None = None
    trainer: Trainer | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    podSpecOverrides: list[PodSpecOverride] | None = None
    suspend: bool | None = Field(default=False, strict=True)
    managedBy: str | None = TRAINJOB_CONTROLLER

    @field_validator("managedBy")
    @classmethod
    def _known_manager(cls, value: str | None) -> str | None:
        # Upstream's CEL rule, with trainhub's own value added as for the v1 kinds.
        if value is not None and value not in (TRAINJOB_CONTROLLER, MULTIKUEUE, TRAINHUB_MANAGER):
            raise ValueError(
                f"ManagedBy must be {TRAINJOB_CONTROLLER}, {MULTIKUEUE} or {TRAINHUB_MANAGER} "
                f"if set (got {value!r})"
            )
        return value


class TrainJobStatus(_Open):
    conditions: list[dict[str, Any]] | None = None
    jobsStatus: list[dict[str, Any]] | None = None


class TorchElasticPolicy(_Closed):
    maxRestarts: int | None = Field(default=None, strict=True)
    minNodes: int | None = Field(default=None, strict=True)
    maxNodes: int | None = Field(default=None, strict=True)
    metrics: list[dict[str, Any]] | None = None


class TorchPolicy(_Closed):
    numProcPerNode: int | str | None = Field(default="auto", union_mode="left_to_right")
    elasticPolicy: TorchElasticPolicy | None = None

    @field_validator("numProcPerNode")
    @classmethod
    def _proc_count(cls, value: int | str | None) -> int | str | None:
        if value is None or (isinstance(value, int) and value > 0) or value in TORCH_PROC_WORDS:
            return value
        raise ValueError(
            f"NumProcPerNode must be equal to auto, cpu, gpu, or int value (got {value!r})"
        )


class MPIPolicy(_Closed):
    numProcPerNode: int | None = Field(default=1, strict=True)
    mpiImplementation: Literal["OpenMPI"] | None = "OpenMPI"
    sshAuthMountPath: str | None = "/root/.ssh"
    runLauncherAsNode: bool | None = Field(default=False, strict=True)


class MLPolicy(_Closed):
    numNodes: int | None = Field(default=None, strict=True)
    torch: TorchPolicy | None = None
    mpi: MPIPolicy | None = None

    @model_validator(mode="after")
    def _cel_rules(self) -> MLPolicy:
        if self.numNodes is not None and self.torch is not None and self.torch.elasticPolicy:
            raise ValueError("numNodes should not be set if torch.elasticPolicy is configured")
        if self.torch is not None and self.mpi is not None:
            raise ValueError("Only one of the policy can be configured")
        return self


class PodGroupPolicy(_Closed):
    coscheduling: dict[str, Any] | None = None


class JobTemplateSpec(_Open):
    """A batch Job's template: its own metadata and `spec.template`, the pod template."""

    class Spec(_Open):
        template: PodTemplateSpec

    metadata: dict[str, Any] | None = None
    spec: Spec


class ReplicatedJob(_Open):
    name: str = Field(min_length=1, max_length=63)
    replicas: int | None = Field(default=None, strict=True, ge=0)
    dependsOn: list[dict[str, Any]] | None = None
    template: JobTemplateSpec

    @model_validator(mode="after")
    def _one_replica_where_upstream_needs_it(self) -> ReplicatedJob:
        """Kubeflow Trainer v2.0.0's runtime webhooks: the launcher and the replicated jobs
        labelled as a TrainJob's trainer or initializer steps (their Job template's
        `trainjob-ancestor-step` label) run as one Job (`replicas` absent: JobSet's 1)."""
        labels = (self.template.metadata or {}).get("labels") or {}
        step = labels.get(ANCESTOR_LABEL) if isinstance(labels, dict) else None
        needs_one = self.name == LAUNCHER or step in _ANCESTOR_STEPS
        if needs_one and self.replicas is not None and self.replicas != 1:
            raise ValueError(f"replicas: always must be 1 (got {self.replicas})")
        return self

    def containers(self) -> list[Container]:
        spec = self.template.spec.template.spec
        return [*(spec.initContainers or []), *spec.containers]


class JobSetSpec(_Open):
    replicatedJobs: list[ReplicatedJob] = Field(default_factory=list)
    successPolicy: dict[str, Any] | None = None

    def job(self, name: str) -> ReplicatedJob | None:
        return next((j for j in self.replicatedJobs if j.name == name), None)


class JobSetTemplateSpec(_Open):
    metadata: dict[str, Any] | None = None
    spec: JobSetSpec = Field(default_factory=JobSetSpec)


class TrainingRuntimeSpec(_Closed):
    mlPolicy: MLPolicy | None = None
    podGroupPolicy: PodGroupPolicy | None = None
    template: JobSetTemplateSpec


class RuntimeMeta(_Open):
    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = None


class TrainingRuntime(_Closed):
    apiVersion: Literal["trainer.kubeflow.org/v1alpha1"]
    kind: Literal["TrainingRuntime"]
    metadata: RuntimeMeta
    spec: TrainingRuntimeSpec


class ClusterTrainingRuntime(_Closed):
    apiVersion: Literal["trainer.kubeflow.org/v1alpha1"]
    kind: Literal["ClusterTrainingRuntime"]
    metadata: RuntimeMeta
    spec: TrainingRuntimeSpec


AnyRuntime = TrainingRuntime | ClusterTrainingRuntime


class TrainJobDocument(_Closed):
    """The TrainJob as upstream stores it, before its runtime is known."""

    apiVersion: Literal["trainer.kubeflow.org/v1alpha1"]
    kind: Literal["TrainJob"]
    metadata: ObjectMeta
    spec: TrainJobSpec
    status: TrainJobStatus | None = None
