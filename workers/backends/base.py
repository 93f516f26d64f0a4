"""The backend interface: how a worker makes pods and services exist in its cluster."""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from bus.retry import RetryPolicy
from schemas.cluster import NodeSnapshot
from schemas.events import ListedPod
from schemas.kubeflow import AnyJob
from schemas.status import JobStatus
from workers.gang_scheduling import GangScheduling, PodGroupPlan
from workers.network import ClusterNetwork, Network
from workers.rendering import AccessPlan, ConfigMapPlan, PodPlan, SecretPlan, ServicePlan

PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]
UNSCHEDULABLE_PREFIX = "Unschedulable:"
"""How a Pending observation's message starts when no node can take the pod."""


class BackendError(RuntimeError):
    """The cluster refused a request. A `transient` refusal may pass when the request is made
    again later (the apiserver was unreachable past the retries); the others never will
    (forbidden, an invalid object, a missing namespace)."""

    transient: ClassVar[bool] = False


BACKEND_RETRY = RetryPolicy(initial_wait=0.2, max_wait=5.0)
"""How a worker tries again the work a transient refusal interrupted: until it passes."""


def is_transient(error: BaseException) -> bool:
    """A refusal of the cluster that may pass when the request is made again later."""
    return isinstance(error, BackendError) and error.transient


class PodLogsUnavailable(BackendError):
    """A pod's log cannot be read (the pod is gone, or the node serves no logs)."""


@dataclass(frozen=True)
class PodObservation:
    job_uid: str
    name: str
    phase: PodPhase
    exit_code: int | None = None
    """The default container's exit code, once it terminated; for a pod whose containers the
    kubelet restarts in place, the latest such exit while it is Pending or Running."""
    message: str | None = None
    node: str | None = None
    restarts: int = 0
    """Container exits the kubelet restarted (or is about to restart) in place, over every
    container and init container of this pod: restartCount plus the exits whose new
    container does not exist yet. Only a kubelet restarts in place; backends whose pods the
    worker re-creates leave it 0."""
    restarting: bool = False
    """Pending or Running, but a container exited and waits for the kubelet to start it
    again."""
    uid: str | None = None
    """The pod object's uid where the backend has one: a pod re-created under its name is
    another pod, with restart counts of its own."""


@dataclass(frozen=True)
class JobObjectLost:
    """The job's own object (its CR on a member cluster in direct mode) was deleted by
    someone else while the worker held it for `attempt`."""

    job_uid: str
    attempt: int | None
    what: str
    """`<Kind> <name>`, as messages name the job."""


@dataclass(frozen=True)
class JobObjectSuspension:
    """Someone else (`kubectl patch`) set the job's own object's `runPolicy.suspend` to
    `suspend` while the worker held it for `attempt`: the job is to follow it, as the
    Training Operator's jobs follow their objects."""

    job_uid: str
    attempt: int | None
    suspend: bool
    what: str
    """`<Kind> <name>`, as messages name the job."""


JobObjectNews = JobObjectLost | JobObjectSuspension
"""What the job's own object tells the worker beyond its pods."""


def deleted_before_it_ended(what: str, cluster: str) -> str:
    """Why a job fails whose own object someone else deleted before it ended (`what`:
    `<Kind> <name>`); the same words in direct and delegate mode."""
    return f"{what} was deleted on {cluster} before it ended."


@dataclass
class Capacity:
    nodes: list[NodeSnapshot]
    jobs: set[str] = field(default_factory=set)
    """Jobs whose pods the nodes' `requested` already counts."""


class Backend(abc.ABC):
    kind: str
    keeps_pods: bool = False
    """Whether pods outlive this worker process (true for a real cluster); when they do not,
    a stopping worker hands its unfinished jobs back to the hub."""
    init_containers: ClassVar[bool] = False
    """Whether pods run their init containers (then workers wait for their master in one);
    without, the backend itself holds a pod with a `master_address` until it is reachable."""
    gang_scheduling: GangScheduling | None = None
    """The gang scheduler whose PodGroups this backend makes, and its pods ask for (a real
    cluster's; the others have no scheduler to ask)."""

    def __init__(self) -> None:
        self.observations: asyncio.Queue[PodObservation] = asyncio.Queue()
        self.job_object_news: asyncio.Queue[JobObjectNews] = asyncio.Queue()
        """Jobs whose own object someone else deleted or suspended or resumed (only backends
        that make one say so)."""

    def network(self) -> Network:
        """A network view for one job's rendering (local backends remap its ports)."""
        return ClusterNetwork()

    async def start(self) -> None:
        """Connect; called once before anything else."""

    async def close(self) -> None:
        """Stop watching and release connections (pods stay where the cluster keeps them)."""

    async def ensure_job_object(self, job: AnyJob, attempt: int) -> None:
        """Create the job's own object where the cluster serves its kind (a real cluster
        with the Kubeflow CRDs), or accept that this job's exists; the job's objects made
        after it are owned by it. Others have no such object and ignore it."""

    def makes_job_object(self, job: AnyJob) -> bool:
        """Whether the job gets its own object in the cluster, whose pods and other objects
        it owns (then a job assigned here with nothing of it left in the cluster lost that
        object, and them with it, while no worker watched)."""
        return False

    async def write_job_status(self, job: AnyJob, status: JobStatus) -> None:
        """Write the run's status into the job's own object, where it has one."""

    async def create_config_map(self, job_uid: str, config_map: ConfigMapPlan) -> None:
        """Create, or accept that it already exists (backends without volumes ignore it)."""

    async def update_config_map(self, job_uid: str, config_map: ConfigMapPlan) -> None:
        """Write the ConfigMap's data over what it holds (creating it if it is gone);
        backends without volumes ignore it."""

    async def create_secret(self, job_uid: str, secret: SecretPlan) -> None:
        """Create, or accept that it already exists (backends without volumes ignore it)."""

    async def create_access(self, job_uid: str, access: AccessPlan) -> None:
        """Create the ServiceAccount, Role and RoleBinding, or accept that they exist
        (backends whose pods cannot reach a Kubernetes API ignore them)."""

    async def create_pod_group(self, job_uid: str, group: PodGroupPlan) -> None:
        """Create the job's PodGroup, or bring the one that exists up to date with it
        (backends without a gang scheduler ignore it)."""

    async def delete_pod_group(self, job_uid: str, group: PodGroupPlan) -> None:
        """Delete the job's PodGroup; missing is fine."""

    @abc.abstractmethod
    async def create_service(self, job_uid: str, service: ServicePlan) -> None:
        """Create, or accept that it already exists."""

    @abc.abstractmethod
    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        """Create, or accept that it already exists; its phases arrive as observations."""

    @abc.abstractmethod
    async def delete_pod(self, job_uid: str, name: str, namespace: str) -> None:
        """Delete the pod and its service; missing is fine. Where the backend can, no
        observation of the deleted pod arrives once this returns (local and sim)."""

    @abc.abstractmethod
    async def delete_job(self, job_uid: str, namespace: str | None = None) -> None:
        """Delete every object labelled with the job's uid; `namespace`: where they are, when
        known (an identity that may not list every namespace still finds them there)."""

    @abc.abstractmethod
    async def capacity(self) -> Capacity: ...

    @abc.abstractmethod
    async def job_uids(self) -> set[str]:
        """Jobs that have objects in the cluster (for adoption after a restart)."""

    @abc.abstractmethod
    async def pod_logs(self, job_uid: str, name: str) -> str: ...

    async def job_pod_names(self, job_uid: str) -> list[str]:
        """The names of the job's pods that exist in the cluster, found by its label (for a
        job whose run the worker no longer holds: one that finished a while ago)."""
        return []

    async def job_pods(self, job_uid: str) -> list[ListedPod]:
        """The job's pods that exist in the cluster, as `job_pod_names` finds them, with their
        phases where the backend knows them without asking per pod (else `Unknown`): for a
        job whose run the worker no longer holds, or whose pods another operator makes."""
        return [ListedPod(name=name, phase="Unknown") for name in await self.job_pod_names(job_uid)]

    def forget_job(self, job_uid: str) -> None:
        """The job finished and its run left the worker. A backend whose cluster lives in
        this process's memory may let go of its ended pods (their logs with them); a real
        cluster's objects stay where cleanPodPolicy left them, found again by their labels."""
