"""Kubeflow Training Operator v1 job documents (`kubeflow.org/v1`), accepted unchanged.

Each kind names its replica map differently; `TrainingJob.replica_specs` hides that so the
rest of trainhub never branches on the field name.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.pod import PodTemplateSpec
from schemas.run_policy import RunPolicy
from schemas.status import JobStatus

API_VERSION = "kubeflow.org/v1"
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# uuid5 namespace for jobs whose producer set no uid: the same namespace/name is the same job.
_JOB_UID_NAMESPACE = uuid.UUID("6f1d4c62-3f0e-4b8e-9a53-9d7a1f2f7a10")


def derive_job_uid(namespace: str, name: str) -> str:
    return str(uuid.uuid5(_JOB_UID_NAMESPACE, f"{namespace}/{name}"))


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(max_length=63)
    namespace: str = Field(default="default", max_length=63)
    uid: str | None = Field(default=None, max_length=128)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None

    @field_validator("name")
    @classmethod
    def _dns1035(cls, value: str) -> str:
        if not _DNS1035.match(value):
            raise ValueError(
                f"job name {value!r} is not a DNS-1035 label (lower-case letters, digits and "
                "'-', starting with a letter, ending with a letter or digit)"
            )
        return value

    @field_validator("namespace")
    @classmethod
    def _dns1123(cls, value: str) -> str:
        if not _DNS1123.match(value):
            raise ValueError(f"namespace {value!r} is not a DNS-1123 label")
        return value


class ReplicaSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int | None = Field(default=None, ge=0, le=10_000)
    template: PodTemplateSpec
    restartPolicy: Literal["Always", "OnFailure", "Never", "ExitCode"] | None = None


ReplicaSpecs = dict[str, ReplicaSpec]


class ElasticPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    minReplicas: int | None = Field(default=None, ge=0)
    maxReplicas: int | None = Field(default=None, ge=0)
    rdzvBackend: str | None = None
    rdzvHost: str | None = None
    rdzvPort: int | None = Field(default=None, ge=1, le=65535)
    rdzvId: str | None = None
    rdzvConf: list[dict[str, str]] | None = None
    standalone: bool | None = None
    nProcPerNode: int | None = Field(default=None, ge=1)
    maxRestarts: int | None = Field(default=None, ge=0)
    metrics: list[dict[str, Any]] | None = None


class _JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runPolicy: RunPolicy = Field(default_factory=RunPolicy)


class TFJobSpec(_JobSpec):
    tfReplicaSpecs: ReplicaSpecs
    successPolicy: Literal["", "AllWorkers"] | None = None
    enableDynamicWorker: bool | None = None


class PyTorchJobSpec(_JobSpec):
    pytorchReplicaSpecs: ReplicaSpecs
    elasticPolicy: ElasticPolicy | None = None
    nprocPerNode: str | None = None


class XGBoostJobSpec(_JobSpec):
    xgbReplicaSpecs: ReplicaSpecs


class MPIJobSpec(_JobSpec):
    mpiReplicaSpecs: ReplicaSpecs
    slotsPerWorker: int | None = Field(default=None, ge=1)
    cleanPodPolicy: Literal["All", "Running", "None"] | None = None
    mainContainer: str | None = None
    launcherCreationPolicy: Literal["AtStartup", "WaitForWorkersReady"] | None = None
    runLauncherAsWorker: bool | None = None


class PaddleJobSpec(_JobSpec):
    paddleReplicaSpecs: ReplicaSpecs
    elasticPolicy: dict[str, Any] | None = None


class JAXJobSpec(_JobSpec):
    jaxReplicaSpecs: ReplicaSpecs


class _TrainingJobBase(BaseModel):
    """Fields and behaviour shared by every kind."""

    model_config = ConfigDict(extra="forbid")

    REPLICA_FIELD: ClassVar[str]
    REPLICA_TYPES: ClassVar[tuple[str, ...]]
    DEFAULT_CONTAINER: ClassVar[str]
    FRAMEWORK: ClassVar[str]

    apiVersion: Literal["kubeflow.org/v1"]
    metadata: ObjectMeta
    status: JobStatus | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise_replica_keys(cls, data: Any) -> Any:
        """Upstream accepts `worker` for `Worker`; map keys onto the canonical spelling."""
        if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
            return data
        spec = data["spec"]
        specs = spec.get(cls.REPLICA_FIELD)
        if not isinstance(specs, dict):
            return data
        canonical = {t.lower(): t for t in cls.REPLICA_TYPES}
        normalised: dict[str, Any] = {}
        for key, value in specs.items():
            name = canonical.get(str(key).lower())
            if name is None:
                allowed = ", ".join(cls.REPLICA_TYPES)
                raise ValueError(
                    f"spec.{cls.REPLICA_FIELD}: replica type {key!r} is not valid for "
                    f"{data.get('kind')}; allowed: {allowed}"
                )
            if name in normalised:
                raise ValueError(f"spec.{cls.REPLICA_FIELD}: replica type {name} given twice")
            normalised[name] = value
        return {**data, "spec": {**spec, cls.REPLICA_FIELD: normalised}}

    @model_validator(mode="after")
    def _default_container_present(self) -> _TrainingJobBase:
        for rtype, rspec in self.replica_specs.items():
            names = [c.name for c in rspec.template.spec.containers]
            if self.DEFAULT_CONTAINER not in names:
                raise ValueError(
                    f"spec.{self.REPLICA_FIELD}.{rtype}.template.spec.containers: no container "
                    f"named {self.DEFAULT_CONTAINER!r} (found {names})"
                )
        return self

    @property
    def run_policy(self) -> RunPolicy:
        policy: RunPolicy = self.spec.runPolicy  # type: ignore[attr-defined]
        return policy

    @property
    def replica_specs(self) -> ReplicaSpecs:
        specs: ReplicaSpecs = getattr(self.spec, self.REPLICA_FIELD)  # type: ignore[attr-defined]
        return specs

    @property
    def uid(self) -> str:
        """The job's identity on the bus: the producer's uid, else derived from namespace/name."""
        if self.metadata.uid:
            return self.metadata.uid
        return derive_job_uid(self.metadata.namespace, self.metadata.name)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def replicas_of(self, rtype: str) -> int:
        rspec = self.replica_specs.get(rtype)
        if rspec is None:
            return 0
        return 1 if rspec.replicas is None else rspec.replicas

    @property
    def total_replicas(self) -> int:
        return sum(self.replicas_of(t) for t in self.replica_specs)

    def to_document(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class TFJob(_TrainingJobBase):
    REPLICA_FIELD = "tfReplicaSpecs"
    REPLICA_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")
    DEFAULT_CONTAINER = "tensorflow"
    FRAMEWORK = "tensorflow"
    kind: Literal["TFJob"]
    spec: TFJobSpec

    @model_validator(mode="after")
    def _one_chief(self) -> TFJob:
        chiefs = self.replicas_of("Chief") + self.replicas_of("Master")
        if chiefs > 1:
            raise ValueError("spec.tfReplicaSpecs: at most one Chief/Master replica is allowed")
        return self


class PyTorchJob(_TrainingJobBase):
    REPLICA_FIELD = "pytorchReplicaSpecs"
    REPLICA_TYPES = ("Master", "Worker")
    DEFAULT_CONTAINER = "pytorch"
    FRAMEWORK = "pytorch"
    kind: Literal["PyTorchJob"]
    spec: PyTorchJobSpec

    @model_validator(mode="after")
    def _pytorch_rules(self) -> PyTorchJob:
        specs = self.spec.pytorchReplicaSpecs
        if "Master" in specs and self.replicas_of("Master") != 1:
            raise ValueError("spec.pytorchReplicaSpecs.Master.replicas: must be 1")
        if self.spec.elasticPolicy is not None and "Worker" not in specs:
            raise ValueError("spec.elasticPolicy: an elastic PyTorchJob must configure Workers")
        if (
            self.spec.elasticPolicy is not None
            and self.spec.elasticPolicy.nProcPerNode is not None
            and self.spec.nprocPerNode is not None
        ):
            raise ValueError(
                "spec.elasticPolicy.nProcPerNode is deprecated and must not be set together "
                "with spec.nprocPerNode"
            )
        return self


class XGBoostJob(_TrainingJobBase):
    REPLICA_FIELD = "xgbReplicaSpecs"
    REPLICA_TYPES = ("Master", "Worker")
    DEFAULT_CONTAINER = "xgboost"
    FRAMEWORK = "xgboost"
    kind: Literal["XGBoostJob"]
    spec: XGBoostJobSpec

    @model_validator(mode="after")
    def _master_once(self) -> XGBoostJob:
        if self.replicas_of("Master") != 1:
            raise ValueError("spec.xgbReplicaSpecs.Master: exactly one Master replica is required")
        return self


class MPIJob(_TrainingJobBase):
    REPLICA_FIELD = "mpiReplicaSpecs"
    REPLICA_TYPES = ("Launcher", "Worker")
    DEFAULT_CONTAINER = "mpi"
    FRAMEWORK = "mpi"
    kind: Literal["MPIJob"]
    spec: MPIJobSpec

    def replicas_of(self, rtype: str) -> int:
        rspec = self.replica_specs.get(rtype)
        if rspec is None:
            return 0
        if rspec.replicas is None:
            return 1 if rtype == "Launcher" else 0
        return rspec.replicas

    @model_validator(mode="after")
    def _default_container_present(self) -> MPIJob:
        # MPIJob lets the user name the main container; no fixed default name is required.
        return self


class PaddleJob(_TrainingJobBase):
    REPLICA_FIELD = "paddleReplicaSpecs"
    REPLICA_TYPES = ("Master", "Worker")
    DEFAULT_CONTAINER = "paddle"
    FRAMEWORK = "paddle"
    kind: Literal["PaddleJob"]
    spec: PaddleJobSpec


class JAXJob(_TrainingJobBase):
    REPLICA_FIELD = "jaxReplicaSpecs"
    REPLICA_TYPES = ("Worker",)
    DEFAULT_CONTAINER = "jax"
    FRAMEWORK = "jax"
    kind: Literal["JAXJob"]
    spec: JAXJobSpec


TrainingJob = Annotated[
    TFJob | PyTorchJob | XGBoostJob | MPIJob | PaddleJob | JAXJob, Field(discriminator="kind")
]
JOB_CLASSES: dict[str, type[_TrainingJobBase]] = {
    c.model_fields["kind"].annotation.__args__[0]: c  # type: ignore[union-attr]
    for c in (TFJob, PyTorchJob, XGBoostJob, MPIJob, PaddleJob, JAXJob)
}
AnyJob = TFJob | PyTorchJob | XGBoostJob | MPIJob | PaddleJob | JAXJob
