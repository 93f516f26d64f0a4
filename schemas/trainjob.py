"""A TrainJob as trainhub dispatches it: upstream's document, resolved against its runtime
into replicated jobs that read like any v1 kind's replica specs (the hub's gang fit, the
worker's rendering and run need nothing more)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, ClassVar

from pydantic import PrivateAttr, ValidationInfo, model_validator

from schemas.host_ports import pod_host_ports
from schemas.job_meta import ReplicaSpec, derive_job_uid
from schemas.run_policy import RunPolicy
from schemas.trainer import (
    DATASET_INITIALIZER,
    LAUNCHER,
    MODEL_INITIALIZER,
    NODE,
    TRAINER_API_VERSION,
    AnyRuntime,
    TrainJobDocument,
)
from schemas.trainer_runtimes import RuntimeCatalog, runtime_catalog
from schemas.trainjob_resolution import ResolvedTrainJob, resolve

UNKNOWN_RUNTIME = "unsupported runtime"
"""In the message of a TrainJob refused for naming a runtime its reader does not know."""
RUNTIMES_CONTEXT = "runtimes"
"""The validation context's key for the `RuntimeCatalog` a TrainJob is resolved in
(`parse_job(..., runtimes=)`); without it, this process's catalog."""
BATCH_BACKOFF_LIMIT = 6
"""A batch Job's default backoffLimit: each replicated job's pods are retried that often."""


class TrainJob(TrainJobDocument):
    API_VERSION: ClassVar[str] = TRAINER_API_VERSION
    REPLICA_FIELD: ClassVar[str] = "replicatedJobs"
    REPLICA_TYPES: ClassVar[tuple[str, ...]] = (
        DATASET_INITIALIZER,
        MODEL_INITIALIZER,
        LAUNCHER,
        NODE,
    )
    DEFAULT_CONTAINER: ClassVar[str] = NODE
    FRAMEWORK: ClassVar[str] = "trainer"
    PORT_NAME: ClassVar[str] = "trainer"
    DEFAULT_PORT: ClassVar[int] = 29500
    """Upstream's ContainerTrainerPort: torch's PET_MASTER_PORT."""

    _resolved: ResolvedTrainJob | None = PrivateAttr(default=None)
    _runtime: AnyRuntime | None = PrivateAttr(default=None)
    _run_policy: RunPolicy | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _with_runtime(self, info: ValidationInfo) -> TrainJob:
        ref = self.spec.runtimeRef
        given = info.context.get(RUNTIMES_CONTEXT) if isinstance(info.context, dict) else None
        catalog = given if isinstance(given, RuntimeCatalog) else runtime_catalog()
        runtime = catalog.find(ref, self.metadata.namespace)
        if runtime is None:
            kind = ref.kind or "ClusterTrainingRuntime"
            raise ValueError(
                f"spec.runtimeRef.name: {UNKNOWN_RUNTIME}: {kind} {ref.name!r} is not known "
                f"to trainhub; known runtimes: {catalog.known_text()} (got {ref.name!r})"
            )
        problems: list[str] = []
        self._resolved = resolve(self.spec, runtime, problems)
        if problems:
            raise ValueError("; ".join(problems))
        self._runtime = runtime
        return self

    @property
    def runtime(self) -> AnyRuntime:
        """The runtime the job was resolved against: carried with it past the hub (its
        assignment, its state), so that it runs as placed whatever the catalog says later."""
        if self._runtime is None:  # model_construct skips validation
            raise ValueError(f"TrainJob {self.key} was not resolved against its runtime")
        return self._runtime

    @property
    def resolved(self) -> ResolvedTrainJob:
        if self._resolved is None:  # model_construct skips validation
            raise ValueError(f"TrainJob {self.key} was not resolved against its runtime")
        return self._resolved

    @property
    def replica_specs(self) -> dict[str, ReplicaSpec]:
        return self.resolved.replica_specs

    def replicas_of(self, rtype: str) -> int:
        rspec = self.replica_specs.get(rtype)
        return 0 if rspec is None else rspec.replicas or 0

    @property
    def total_replicas(self) -> int:
        return sum(self.replicas_of(t) for t in self.replica_specs)

    @property
    def run_policy(self) -> RunPolicy:
        """TrainJob's own suspend and managedBy, as the v1 kinds' runPolicy carries them.
        Made once per value of the two: the scheduling pass reads it for every waiting job
        on every pass, and making it each time was a third of a TrainJob's CPU there."""
        private = self.__pydantic_private__  # a slot: pydantic's __getattr__ is the slow way
        made: RunPolicy | None = private.get("_run_policy") if private is not None else None
        if (
            made is None
            or made.suspend != self.spec.suspend
            or made.managedBy != self.spec.managedBy
        ):
            made = RunPolicy.model_construct(
                suspend=self.spec.suspend,
                managedBy=self.spec.managedBy,
                backoffLimit=BATCH_BACKOFF_LIMIT,
            )
            self._run_policy = made
        return made

    @property
    def uid(self) -> str:
        return self.metadata.uid or derive_job_uid(self.metadata.namespace, self.metadata.name)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def added_init_requests(self, rtype: str) -> tuple[dict[str, Decimal], ...]:
        return ()

    def host_ports(self, rtype: str) -> frozenset[str]:
        spec = self.replica_specs[rtype].template.spec
        return pod_host_ports(spec.model_dump(mode="json", exclude_none=True))

    def warnings(self) -> list[str]:
        return []

    def to_document(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)
