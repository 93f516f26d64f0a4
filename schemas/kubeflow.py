"""Kubeflow Training Operator v1 job documents (`kubeflow.org/v1`), accepted unchanged.

Each kind names its replica map differently; `TrainingJob.replica_specs` hides that so the
rest of trainhub never branches on the field name.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.host_ports import pod_host_ports, port_key
from schemas.job_meta import ObjectMeta, ReplicaSpecs
from schemas.job_meta import derive_job_uid as derive_job_uid
from schemas.quantity import parse_quantity
from schemas.run_policy import RunPolicy
from schemas.sim_annotations import sim_annotation_problem
from schemas.status import JobStatus
from schemas.trainjob import TrainJob

API_VERSION = "kubeflow.org/v1"
_SERVICE_NAME_MAX = 63


class RDZVConf(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = ""
    value: str = ""


class ElasticPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    minReplicas: int | None = Field(strict=True, default=None, ge=0)
    maxReplicas: int | None = Field(strict=True, default=None, ge=0)
    rdzvBackend: str | None = None
    rdzvHost: str | None = None
    rdzvPort: int | None = Field(strict=True, default=None, ge=1, le=65535)
    rdzvId: str | None = None
    rdzvConf: list[RDZVConf] | None = None
    standalone: bool | None = Field(default=None, strict=True)
    nProcPerNode: int | None = Field(strict=True, default=None, ge=1)
    maxRestarts: int | None = Field(strict=True, default=None, ge=0)
    metrics: list[dict[str, Any]] | None = None


class PaddleElasticPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    minReplicas: int | None = Field(strict=True, default=None, ge=0)
    maxReplicas: int | None = Field(strict=True, default=None, ge=0)
    maxRestarts: int | None = Field(strict=True, default=None, ge=0)
    metrics: list[dict[str, Any]] | None = None


class _JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runPolicy: RunPolicy = Field(default_factory=RunPolicy)


class TFJobSpec(_JobSpec):
    tfReplicaSpecs: ReplicaSpecs
    successPolicy: Literal["", "AllWorkers"] | None = None
    enableDynamicWorker: bool | None = Field(default=None, strict=True)


class PyTorchJobSpec(_JobSpec):
    pytorchReplicaSpecs: ReplicaSpecs
    elasticPolicy: ElasticPolicy | None = None
    nprocPerNode: str | None = None


class XGBoostJobSpec(_JobSpec):
    xgbReplicaSpecs: ReplicaSpecs


class MPIJobSpec(_JobSpec):
    mpiReplicaSpecs: ReplicaSpecs
    slotsPerWorker: int | None = Field(strict=True, default=None, ge=1)
    cleanPodPolicy: Literal["All", "Running", "None"] | None = None
    mainContainer: str | None = None
    launcherCreationPolicy: Literal["AtStartup", "WaitForWorkersReady"] | None = None
    runLauncherAsWorker: bool | None = Field(default=None, strict=True)


class PaddleJobSpec(_JobSpec):
    paddleReplicaSpecs: ReplicaSpecs
    elasticPolicy: PaddleElasticPolicy | None = None


class JAXJobSpec(_JobSpec):
    jaxReplicaSpecs: ReplicaSpecs


class _TrainingJobBase(BaseModel):
    """Fields and behaviour shared by every kind."""

    model_config = ConfigDict(extra="forbid")

    API_VERSION: ClassVar[str] = API_VERSION
    REPLICA_FIELD: ClassVar[str]
    REPLICA_TYPES: ClassVar[tuple[str, ...]]
    DEFAULT_CONTAINER: ClassVar[str]
    FRAMEWORK: ClassVar[str]
    REQUIRES_DEFAULT_CONTAINER: ClassVar[bool] = True
    HAS_SERVICES: ClassVar[bool] = True
    """Each replica gets a Service named like its pod, `<job>-<replica type>-<index>`."""
    PORT_NAME: ClassVar[str]
    DEFAULT_PORT: ClassVar[int]
    ADDS_DEFAULT_PORT: ClassVar[bool] = True
    """The operator adds port `PORT_NAME`/`DEFAULT_PORT` to each replica's main container (the
    default container, else the first) unless that container has a port of that name."""

    apiVersion: Literal["kubeflow.org/v1"]
    metadata: ObjectMeta
    status: JobStatus | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise_replica_keys(cls, data: Any) -> Any:
        """Upstream accepts `worker` for `Worker`; map keys onto the canonical spelling and
        order, so that every consumer sees the replica types in the same order."""
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
        ordered = {t: normalised[t] for t in cls.REPLICA_TYPES if t in normalised}
        return {**data, "spec": {**spec, cls.REPLICA_FIELD: ordered}}

    @model_validator(mode="after")
    def _webhook_rules(self) -> _TrainingJobBase:
        """Upstream's admission webhook: report every broken rule at once, then default."""
        problems: list[str] = []
        self._check(problems)
        if problems:
            raise ValueError("; ".join(problems))
        self._apply_defaults()
        return self

    def _check(self, problems: list[str]) -> None:
        """Append one `field.path: what is wrong (got value)` line per broken rule."""
        if not self.replica_specs:
            problems.append(
                f"spec.{self.REPLICA_FIELD}: must configure at least one replica type (got {{}})"
            )
        if self.HAS_SERVICES:
            self._check_service_names(problems)
        for rtype, rspec in self.replica_specs.items():
            wrong = sim_annotation_problem(rspec.template.metadata.annotations or {})
            if wrong is not None:
                where = f"{self._replica_path(rtype)}.template.metadata.annotations"
                problems.append(f"{where}{wrong}")
        if not self.REQUIRES_DEFAULT_CONTAINER:
            return
        for rtype, rspec in self.replica_specs.items():
            names = [c.name for c in rspec.template.spec.containers]
            if self.DEFAULT_CONTAINER not in names:
                problems.append(
                    f"{self._replica_path(rtype)}.template.spec.containers: must have at least "
                    f"one container named {self.DEFAULT_CONTAINER!r} (got {names})"
                )

    def _check_service_names(self, problems: list[str]) -> None:
        """trainhub does better: upstream's webhook checks the job's name only, and a long
        one fails later, when the apiserver refuses a replica's Service (a DNS-1035 label)."""
        for rtype in self.replica_specs:
            count = self.replicas_of(rtype)
            longest = f"{self.metadata.name}-{rtype.lower()}-{count - 1}"
            if count > 0 and len(longest) > _SERVICE_NAME_MAX:
                problems.append(
                    f"metadata.name: too long for {count} {rtype} replica(s): their Services "
                    f"are named <name>-{rtype.lower()}-<index>, and {longest!r} has "
                    f"{len(longest)} characters, over the {_SERVICE_NAME_MAX} of a Service name "
                    f"(got a name of {len(self.metadata.name)})"
                )

    def _apply_defaults(self) -> None:
        """Defaults that upstream's mutating webhook writes into the stored job."""

    def _replica_path(self, rtype: str) -> str:
        return f"spec.{self.REPLICA_FIELD}.{rtype}"

    def warnings(self) -> list[str]:
        """Admission warnings: accepted, but the user should change the document."""
        return []

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

    def added_init_requests(self, rtype: str) -> tuple[dict[str, Decimal], ...]:
        """Requests of the init containers the operator adds to `rtype`'s pods wherever they
        run (placement counts them as the scheduler will)."""
        return ()

    def host_ports(self, rtype: str) -> frozenset[str]:
        """The host ports each `rtype` pod holds on its node (schemas/host_ports.py), the port
        the operator adds included."""
        spec = self.replica_specs[rtype].template.spec
        host_network = (spec.model_extra or {}).get("hostNetwork") is True
        if not host_network and not any(
            port.hostPort
            for container in [*spec.containers, *(spec.initContainers or ())]
            for port in container.ports or ()
        ):
            return frozenset()  # most pods: nothing to read
        held = pod_host_ports(spec.model_dump(mode="json", exclude_none=True))
        if not (host_network and self.ADDS_DEFAULT_PORT):
            return held
        names = [c.name for c in spec.containers]
        main = spec.containers[
            names.index(self.DEFAULT_CONTAINER) if self.DEFAULT_CONTAINER in names else 0
        ]
        if any(port.name == self.PORT_NAME for port in main.ports or ()):
            return held
        return held | {port_key(None, self.DEFAULT_PORT)}

    @property
    def total_replicas(self) -> int:
        return sum(self.replicas_of(t) for t in self.replica_specs)

    def to_document(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class TFJob(_TrainingJobBase):
    REPLICA_FIELD = "tfReplicaSpecs"
    REPLICA_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")
    DEFAULT_CONTAINER = "tensorflow"
    PORT_NAME = "tfjob-port"
    DEFAULT_PORT = 2222
    FRAMEWORK = "tensorflow"
    kind: Literal["TFJob"]
    spec: TFJobSpec

    def _check(self, problems: list[str]) -> None:
        super()._check(problems)
        # Upstream counts Chief/Master types; a Chief with 2 replicas passes its webhook and
        # then fails inside TensorFlow, so the replicas are counted as well.
        chiefs = {t: self.replicas_of(t) for t in ("Chief", "Master") if t in self.replica_specs}
        if len(chiefs) > 1 or sum(chiefs.values()) > 1:
            got = ", ".join(f"{t} replicas {n}" for t, n in chiefs.items())
            problems.append(
                f"spec.tfReplicaSpecs: at most one Chief or Master replica is allowed (got {got})"
            )


PYTORCH_INIT_RESOURCES = {
    "requests": {"cpu": "50m", "memory": "10Mi"},
    "limits": {"cpu": "100m", "memory": "20Mi"},
}
"""Resources of the init container that holds a PyTorchJob's Worker pods until the Master's
name resolves (added where pods run on Kubernetes), as upstream's `init-pytorch`."""


class PyTorchJob(_TrainingJobBase):
    REPLICA_FIELD = "pytorchReplicaSpecs"
    REPLICA_TYPES = ("Master", "Worker")
    DEFAULT_CONTAINER = "pytorch"
    PORT_NAME = "pytorchjob-port"
    DEFAULT_PORT = 23456
    FRAMEWORK = "pytorch"
    DEFAULT_NPROC_PER_NODE: ClassVar[str] = "auto"
    kind: Literal["PyTorchJob"]
    spec: PyTorchJobSpec

    def _check(self, problems: list[str]) -> None:
        super()._check(problems)
        specs = self.spec.pytorchReplicaSpecs
        elastic = self.spec.elasticPolicy
        if elastic is not None:
            if "Worker" not in specs:
                problems.append(
                    "spec.pytorchReplicaSpecs.Worker: must be configured if elastic policy is "
                    f"used: an elastic PyTorchJob must configure Workers (got {list(specs)})"
                )
            if elastic.nProcPerNode is not None and self.spec.nprocPerNode is not None:
                problems.append(
                    "spec.elasticPolicy.nProcPerNode: must not be used with spec.nprocPerNode "
                    f"(got {elastic.nProcPerNode} and {self.spec.nprocPerNode!r})"
                )
        if "Master" in specs and self.replicas_of("Master") != 1:
            problems.append(
                "spec.pytorchReplicaSpecs.Master.replicas: must be 1 "
                f"(got {self.replicas_of('Master')})"
            )
        if "Worker" in specs and self.replicas_of("Worker") < 1:
            problems.append(
                "spec.pytorchReplicaSpecs.Worker.replicas: must be at least 1 "
                f"(got {self.replicas_of('Worker')})"
            )

    def added_init_requests(self, rtype: str) -> tuple[dict[str, Decimal], ...]:
        # Counted wherever the job may go: a local or sim cluster, which adds no init
        # container, is at worst credited 50m / 10Mi too much per worker whose containers
        # ask less than that; a Kubernetes cluster's scheduler reserves exactly this.
        if rtype != "Worker" or "Master" not in self.spec.pytorchReplicaSpecs:
            return ()
        requests = PYTORCH_INIT_RESOURCES["requests"]
        return ({r: parse_quantity(q) for r, q in requests.items()},)

    def _apply_defaults(self) -> None:
        elastic = self.spec.elasticPolicy
        if (elastic is None or elastic.nProcPerNode is None) and self.spec.nprocPerNode is None:
            self.spec.nprocPerNode = self.DEFAULT_NPROC_PER_NODE

    def warnings(self) -> list[str]:
        elastic = self.spec.elasticPolicy
        if elastic is not None and elastic.nProcPerNode is not None:
            return ["spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"]
        return []


class XGBoostJob(_TrainingJobBase):
    REPLICA_FIELD = "xgbReplicaSpecs"
    REPLICA_TYPES = ("Master", "Worker")
    DEFAULT_CONTAINER = "xgboost"
    PORT_NAME = "xgboostjob-port"
    DEFAULT_PORT = 9999
    FRAMEWORK = "xgboost"
    kind: Literal["XGBoostJob"]
    spec: XGBoostJobSpec

    def _check(self, problems: list[str]) -> None:
        super()._check(problems)
        if "Master" not in self.spec.xgbReplicaSpecs:
            problems.append(
                "spec.xgbReplicaSpecs.Master: must be present "
                f"(got {list(self.spec.xgbReplicaSpecs)})"
            )
        elif (masters := self.replicas_of("Master")) != 1:
            problems.append(f"spec.xgbReplicaSpecs.Master.replicas: must be 1 (got {masters})")


MPI_DELIVERY_RESOURCES = {"cpu": "100m", "memory": "512Mi"}
"""Requests and limits of the kubectl-delivery init container the operator adds to an
MPIJob's launcher, as upstream's. Upstream also asks 5Gi of ephemeral-storage, left out here:
member clusters report no ephemeral-storage capacity (sim and local nodes, the sandbox's KWOK
nodes), so such a request could never be placed nor scheduled there."""


class MPIJob(_TrainingJobBase):
    REPLICA_FIELD = "mpiReplicaSpecs"
    REPLICA_TYPES = ("Launcher", "Worker")
    DEFAULT_CONTAINER = "mpi"
    PORT_NAME = "mpi-port"
    DEFAULT_PORT = 9999
    ADDS_DEFAULT_PORT = False
    FRAMEWORK = "mpi"
    # v1 MPIJob names its containers freely (`mainContainer` says which one runs the work).
    REQUIRES_DEFAULT_CONTAINER = False
    HAS_SERVICES = False
    kind: Literal["MPIJob"]
    spec: MPIJobSpec

    def replicas_of(self, rtype: str) -> int:
        rspec = self.replica_specs.get(rtype)
        if rspec is None:
            return 0
        if rspec.replicas is None:
            return 1 if rtype == "Launcher" else 0
        return rspec.replicas

    def added_init_requests(self, rtype: str) -> tuple[dict[str, Decimal], ...]:
        if rtype != "Launcher":
            return ()
        return ({r: parse_quantity(q) for r, q in MPI_DELIVERY_RESOURCES.items()},)

    def _check(self, problems: list[str]) -> None:
        super()._check(problems)
        launcher = self.spec.mpiReplicaSpecs.get("Launcher")
        if launcher is None:
            problems.append(
                "spec.mpiReplicaSpecs.Launcher: must be present "
                f"(got {list(self.spec.mpiReplicaSpecs)})"
            )
        elif launcher.replicas is not None and launcher.replicas != 1:
            problems.append(
                f"spec.mpiReplicaSpecs.Launcher.replicas: must be 1 (got {launcher.replicas})"
            )

    @property
    def run_policy(self) -> RunPolicy:
        """The deprecated `spec.cleanPodPolicy` applies when runPolicy does not set one."""
        policy = self.spec.runPolicy
        if policy.cleanPodPolicy is None and self.spec.cleanPodPolicy is not None:
            return policy.model_copy(update={"cleanPodPolicy": self.spec.cleanPodPolicy})
        return policy


class PaddleJob(_TrainingJobBase):
    REPLICA_FIELD = "paddleReplicaSpecs"
    REPLICA_TYPES = ("Master", "Worker")
    DEFAULT_CONTAINER = "paddle"
    PORT_NAME = "master"
    DEFAULT_PORT = 36543
    FRAMEWORK = "paddle"
    kind: Literal["PaddleJob"]
    spec: PaddleJobSpec


class JAXJob(_TrainingJobBase):
    REPLICA_FIELD = "jaxReplicaSpecs"
    REPLICA_TYPES = ("Worker",)
    DEFAULT_CONTAINER = "jax"
    PORT_NAME = "jaxjob-port"
    DEFAULT_PORT = 6666
    FRAMEWORK = "jax"
    kind: Literal["JAXJob"]
    spec: JAXJobSpec


TrainingJob = Annotated[
    TFJob | PyTorchJob | XGBoostJob | MPIJob | PaddleJob | JAXJob, Field(discriminator="kind")
]
JOB_CLASSES: dict[str, type[_TrainingJobBase] | type[TrainJob]] = {
    c.model_fields["kind"].annotation.__args__[0]: c  # type: ignore[union-attr]
    for c in (TFJob, PyTorchJob, XGBoostJob, MPIJob, PaddleJob, JAXJob, TrainJob)
}
AnyJob = TFJob | PyTorchJob | XGBoostJob | MPIJob | PaddleJob | JAXJob | TrainJob
