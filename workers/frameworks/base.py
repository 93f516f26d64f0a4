"""The adapter interface: everything that differs between Kubeflow kinds lives behind it."""

from __future__ import annotations

import abc
import re
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from schemas.kubeflow import AnyJob
from schemas.pod import EnvVar, PodSpec
from schemas.status import ReplicatedJobStatus
from workers.network import Network

_INTEGER = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True)
class ReplicaCounts:
    expected: int
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    succeeded_indexes: frozenset[int] = frozenset()
    """Which replica indexes succeeded: TFJob's rule asks about worker 0 in particular."""
    running: int = 0
    """Pods Running (a JobSet counts them ready); 0 while the job is suspended."""
    held: bool = False
    """Not created yet: the replica type waits for those it depends on."""


@dataclass(frozen=True)
class Endpoint:
    """A replica's service and the port its default container declares (before any remap)."""

    service: str
    port: int


@dataclass(frozen=True)
class ConfigData:
    """A ConfigMap a kind needs besides its pods (MPIJob's hostfile); rendering adds the
    namespace and the job's labels."""

    name: str
    data: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SecretData:
    """A Secret a kind needs besides its pods (a TrainJob's MPI SSH keys), created once
    before them and never changed (`immutable`); rendering adds the namespace and labels."""

    name: str
    type: str
    data: dict[str, str]
    """Key to text (the manifest base64-encodes it)."""
    immutable: bool = True


@dataclass(frozen=True)
class AccessRule:
    """One RBAC rule in the core API group; no `resource_names` means every object."""

    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class AccessData:
    """API access some pods of a kind need (MPIJob's launcher execs into its workers): a
    ServiceAccount and a Role bound to it; rendering adds the namespace and the job's labels."""

    name: str
    """The Role's and the RoleBinding's name."""
    service_account: str
    rules: tuple[AccessRule, ...]
    labels: dict[str, str] = field(default_factory=dict)


def service_name(job: AnyJob, rtype: str, index: int) -> str:
    return f"{job.metadata.name}-{rtype.lower()}-{index}"


def plain_env(values: Mapping[str, str]) -> list[EnvVar]:
    return [EnvVar(name=k, value=v) for k, v in values.items()]


def as_integer(text: str | None) -> int | None:
    """Go's strconv.Atoi: an optional sign and decimal digits, nothing else."""
    return int(text) if text is not None and _INTEGER.match(text) else None


def all_succeeded(counts: Mapping[str, ReplicaCounts], rtype: str) -> bool:
    found = counts.get(rtype)
    return found is not None and found.succeeded >= found.expected


def kind_of(schema: type[AnyJob]) -> str:
    """The `kind` a schema class of schemas/kubeflow.py accepts (its Literal)."""
    (kind,) = typing.get_args(schema.model_fields["kind"].annotation)
    return str(kind)


class FrameworkAdapter(abc.ABC):
    schema: ClassVar[type[AnyJob]]
    """The kind's model in schemas/kubeflow.py, which names its kind, default container and
    port: an adapter states only what the model does not."""
    kind: ClassVar[str]
    default_container: ClassVar[str]
    port_name: ClassVar[str]
    default_port: ClassVar[int]
    default_restart_policy: ClassVar[str]
    creates_services: ClassVar[bool] = True
    """A headless Service per pod, named like the pod."""
    injects_default_port: ClassVar[bool] = True
    """Add `port_name`/`default_port` to the main container unless a port of that name exists."""
    env_in_every_container: ClassVar[bool] = True
    """False: the kind's variables go into the main container only (TF_CONFIG, MPI launcher)."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        schema = cls.__dict__.get("schema")
        if schema is not None:
            cls.kind = kind_of(schema)
            cls.default_container = schema.DEFAULT_CONTAINER
            cls.port_name = schema.PORT_NAME
            cls.default_port = schema.DEFAULT_PORT

    def pod_name(self, job: AnyJob, rtype: str, index: int) -> str:
        """The pod's name, which is also its Service's name where the kind creates Services."""
        return service_name(job, rtype, index)

    def labels_index(self, job: AnyJob, rtype: str) -> bool:
        """Whether the replica's pods carry the replica-index label (upstream's do, but for
        the one MPI launcher)."""
        return True

    def main_container(self, job: AnyJob, rtype: str) -> str:
        """The container whose ports are published and whose exit code decides restarts."""
        names = [c.name for c in job.replica_specs[rtype].template.spec.containers]
        return self.default_container if self.default_container in names else names[0]

    def env_container(self, job: AnyJob, rtype: str) -> str:
        """The container that gets the kind's variables (where not every container does)."""
        return self.main_container(job, rtype)

    def port_of(self, job: AnyJob, rtype: str) -> int:
        """The replica's port: the default container's port of our name, else the default."""
        rspec = job.replica_specs.get(rtype)
        if rspec is not None:
            for container in rspec.template.spec.containers:
                if container.name != self.default_container:
                    continue
                for port in container.ports or []:
                    if port.name == self.port_name:
                        return port.containerPort
        return self.default_port

    def restart_policy(self, job: AnyJob, rtype: str) -> str:
        rspec = job.replica_specs[rtype]
        return rspec.restartPolicy or self.default_restart_policy

    def master_endpoint(self, job: AnyJob) -> Endpoint | None:
        """The replica the others must be able to reach before they start, if the kind has one
        (upstream waits for it with an init container)."""
        return None

    def waits_for_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        master = self.master_endpoint(job)
        return master is not None and self.pod_name(job, rtype, index) != master.service

    def subdomain(self, job: AnyJob) -> str | None:
        """Where the kind's pods get DNS hostnames (`<pod>.<subdomain>`, as a JobSet's): the
        name of a headless Service of the job's own, which the pods set as `subdomain` (and
        their names as `hostname`); None for kinds without."""
        return None

    def depends_on(self, job: AnyJob, rtype: str) -> tuple[tuple[str, str], ...]:
        """The replica types whose pods must reach a status (`Complete`: all succeeded;
        `Ready`: all running or succeeded) before `rtype`'s pods are created."""
        return ()

    def jobs_status(
        self, job: AnyJob, counts: Mapping[str, ReplicaCounts], *, suspended: bool, failed: bool
    ) -> list[ReplicatedJobStatus] | None:
        """A TrainJob's `status.jobsStatus` (one entry per replicated job); None for kinds
        whose status has no such list."""
        return None

    def config_maps(self, job: AnyJob, running: Collection[str] = ()) -> list[ConfigData]:
        """ConfigMaps to create before the pods, and to write again as the job's pods start
        and stop running (`running`: the names of those Running now)."""
        return []

    def secrets(self, job: AnyJob) -> list[SecretData]:
        """Secrets to create before the pods that mount them."""
        return []

    def access(self, job: AnyJob) -> list[AccessData]:
        """ServiceAccounts with their Roles to create before the pods that run under them."""
        return []

    def decorate_pod(self, job: AnyJob, rtype: str, index: int, spec: PodSpec) -> PodSpec:
        """Last kind-specific touches on a pod spec that already has env, ports and policy."""
        return spec

    @abc.abstractmethod
    def is_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        """Whether this replica carries `training.kubeflow.org/job-role=master`."""

    @abc.abstractmethod
    def environment(self, job: AnyJob, rtype: str, index: int, net: Network) -> list[EnvVar]:
        """Variables injected into the replica's containers, in upstream's order."""

    def tolerates_failure(self, job: AnyJob, rtype: str) -> bool:
        """A replica of this type that fails for good leaves the job running."""
        return False

    @abc.abstractmethod
    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        """The kind's success rule over per-replica-type pod counts."""
