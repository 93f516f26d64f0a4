"""TrainJob (Kubeflow Trainer v2): the replicated jobs its runtime resolved to, with what
upstream's runtime plugins add: torchrun's `PET_*` variables (Torch; for torchtune's `tune
run`, the rendezvous, recipe and config in its command instead of the master's address), the
OpenMPI hostfile and variables (MPI), and each Indexed Job pod's JOB_COMPLETION_INDEX (every
plugin)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from schemas.kubeflow import AnyJob
from schemas.pod import Container, EnvVar, PodSpec
from schemas.status import ReplicatedJobStatus
from schemas.trainer import DATASET_INITIALIZER, LAUNCHER, MODEL_INITIALIZER, NODE
from schemas.trainjob import TrainJob
from workers.frameworks.base import (
    ConfigData,
    FrameworkAdapter,
    ReplicaCounts,
    SecretData,
    all_succeeded,
    plain_env,
)
from workers.initializer.storage_uri import (
    PVC_SOURCE_MOUNT,
    PVC_SOURCE_VOLUME,
    STORAGE_URI_ENV,
    StorageUriError,
    parse_storage_uri,
)
from workers.network import Network
from workers.ssh_keys import ecdsa_p521_key_pair

HOSTFILE_DIR = "/etc/mpi"
HOSTFILE_NAME = "hostfile"
HOSTFILE_VOLUME = "mpi-hostfile"
RSH_ARGS = "-o ConnectionAttempts=10"
SSH_AUTH_SUFFIX = "-mpi-ssh-auth"
SSH_AUTH_VOLUME = "mpi-ssh-auth"
SSH_AUTH_TYPE = "kubernetes.io/ssh-auth"
SSH_PRIVATE_KEY = "ssh-privatekey"
"""corev1.SSHAuthPrivateKey."""
SSH_PUBLIC_KEY = "ssh-publickey"
SSH_KEY_FILES = (
    (SSH_PRIVATE_KEY, "id_rsa"),
    (SSH_PUBLIC_KEY, "id_rsa.pub"),
    (SSH_PUBLIC_KEY, "authorized_keys"),
)
"""The Secret's keys as upstream mounts them (its file names, whatever the key's algorithm)."""


def _trainjob(job: AnyJob) -> TrainJob:
    if not isinstance(job, TrainJob):
        raise TypeError(f"the TrainJob adapter got a {job.kind}")
    return job


def hostfile_config_map_name(job: AnyJob) -> str:
    return f"{job.metadata.name}-mpi-hostfile"


def ssh_auth_secret_name(job: AnyJob) -> str:
    return f"{job.metadata.name}{SSH_AUTH_SUFFIX}"


def _with_volumes(spec: PodSpec, volumes: list[dict[str, Any]]) -> PodSpec:
    """Upstream's UpsertVolumes: replace a volume of the same name, else append."""
    names = {v["name"] for v in volumes}
    kept = [v for v in (spec.model_extra or {}).get("volumes", []) if v["name"] not in names]
    return spec.model_copy(update={"volumes": [*kept, *volumes]})


def _pvc_source(spec: PodSpec, rtype: str) -> PodSpec:
    """An initializer whose STORAGE_URI is `pvc://<claim>/<path>`: the claim as the read-only
    volume `pvc-source`, mounted at /mnt/pvc in the initializer's container, where trainhub's
    initializer reads `<path>` (upstream's images fetch hf:// only)."""
    containers = []
    claim = None
    for container in spec.containers:
        uri = next((e.value for e in container.env or [] if e.name == STORAGE_URI_ENV), None)
        if container.name == rtype and uri is not None and uri.startswith("pvc://"):
            try:
                claim = parse_storage_uri(uri).claim
            except StorageUriError:
                claim = None  # the initializer says why when it runs
            if claim is not None:
                mount = {"name": PVC_SOURCE_VOLUME, "mountPath": PVC_SOURCE_MOUNT, "readOnly": True}
                container = _with_mount(container, mount)
        containers.append(container)
    if claim is None:
        return spec
    volume = {
        "name": PVC_SOURCE_VOLUME,
        "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
    }
    return _with_volumes(spec.model_copy(update={"containers": containers}), [volume])


def _with_mount(container: Container, mount: dict[str, Any]) -> Container:
    """Upstream's UpsertVolumeMounts: replace a mount of the same name, else append."""
    mounts = [
        m
        for m in (container.model_extra or {}).get("volumeMounts", [])
        if m["name"] != mount["name"]
    ]
    return container.model_copy(update={"volumeMounts": [*mounts, mount]})


def _with_node_command(spec: PodSpec, command: list[str]) -> PodSpec:
    containers = [
        c.model_copy(update={"command": command}) if c.name == NODE else c for c in spec.containers
    ]
    return spec.model_copy(update={"containers": containers})


class TrainJobAdapter(FrameworkAdapter):
    schema = TrainJob
    default_restart_policy = "OnFailure"
    env_in_every_container = False
    """Upstream's plugins set their variables on the trainer's `node` container only."""

    def pod_name(self, job: AnyJob, rtype: str, index: int) -> str:
        """JobSet's pod names: `<jobset>-<replicated job>-<job index>-<pod index>`, one Job
        per replicated job here."""
        return f"{job.metadata.name}-{rtype}-0-{index}"

    def env_container(self, job: AnyJob, rtype: str) -> str:
        return self.main_container(job, rtype)

    def is_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        master = LAUNCHER if _trainjob(job).resolved.policy == "mpi" else NODE
        return rtype == master and index == 0

    def environment(self, job: AnyJob, rtype: str, index: int, net: Network) -> list[EnvVar]:
        resolved = _trainjob(job).resolved
        env = {"JOB_COMPLETION_INDEX": str(index)}
        if resolved.policy == "torch" and rtype == NODE:
            env |= {
                "PET_NNODES": str(resolved.num_nodes),
                "PET_NPROC_PER_NODE": resolved.proc_per_node,
                "PET_NODE_RANK": str(index),
            }
            if resolved.torchtune is None:  # torchtune's endpoint is in its command instead
                master = self.pod_name(job, NODE, 0)
                # Upstream's Torch plugin: node 0's JobSet DNS hostname, `<job>-node-0-0.<job>`
                # (rendering maps it to the address a network without that DNS reaches it on).
                env |= {
                    "PET_MASTER_ADDR": f"{master}.{self.subdomain(job)}",
                    "PET_MASTER_PORT": str(net.port(master, self.default_port)),
                }
        if resolved.policy == "mpi" and rtype == LAUNCHER:
            env |= {
                "OMPI_MCA_orte_default_hostfile": f"{HOSTFILE_DIR}/{HOSTFILE_NAME}",
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                "OMPI_MCA_orte_set_default_slots": resolved.proc_per_node,
                "OMPI_MCA_plm_rsh_args": RSH_ARGS,
            }
        return plain_env(env)

    def subdomain(self, job: AnyJob) -> str:
        """JobSet's default `network.subdomain`: the JobSet's (TrainJob's) name, a headless
        Service of that name selecting every pod, each pod's hostname its name."""
        return job.metadata.name

    def depends_on(self, job: AnyJob, rtype: str) -> tuple[tuple[str, str], ...]:
        """The runtime's `dependsOn`: the trainer's nodes after the initializers, as JobSet
        creates a replicated job's Job only once those it depends on are Complete (Ready)."""
        return (_trainjob(job).resolved.depends_on or {}).get(rtype, ())

    def jobs_status(
        self, job: AnyJob, counts: Mapping[str, ReplicaCounts], *, suspended: bool, failed: bool
    ) -> list[ReplicatedJobStatus] | None:
        """Upstream's `status.jobsStatus`, copied from the JobSet's `replicatedJobsStatus`
        (Kubeflow Trainer v2.1.0's JobSet plugin; JobSet counts its child Jobs, one per
        replicated job here): a Job not created yet (waiting on `dependsOn`) counts nowhere; a
        finished one is `succeeded` (all its pods) or `failed` (its pod's failure failed the
        TrainJob); an unfinished one is `ready` when its succeeded and ready (Running) pods
        are all it expects, `active` with a pod Pending or Running, `suspended` while the
        TrainJob is."""
        statuses = []
        for rtype in _trainjob(job).replica_specs:
            c = counts.get(rtype, ReplicaCounts(expected=0))
            entry = ReplicatedJobStatus(name=rtype)
            if c.held:
                pass
            elif failed and c.failed > 0:
                entry.failed = 1
            elif c.expected > 0 and c.succeeded >= c.expected:
                entry.succeeded = 1
            else:
                entry.ready = int(c.succeeded + c.running >= c.expected)
                entry.active = int(c.active > 0)
                entry.suspended = int(suspended)
            statuses.append(entry)
        return statuses

    def config_maps(self, job: AnyJob, running: Collection[str] = ()) -> list[ConfigData]:
        """MPI: `<job>-mpi-hostfile`, the launcher first where it runs training too."""
        resolved = _trainjob(job).resolved
        if resolved.policy != "mpi":
            return []
        hosts = [self.pod_name(job, NODE, i) for i in range(job.replicas_of(NODE))]
        if resolved.run_launcher_as_node:
            hosts.insert(0, self.pod_name(job, LAUNCHER, 0))
        slots = resolved.proc_per_node
        return [
            ConfigData(
                name=hostfile_config_map_name(job),
                data={HOSTFILE_NAME: "".join(f"{h} slots={slots}\n" for h in hosts)},
            )
        ]

    def secrets(self, job: AnyJob) -> list[SecretData]:
        """MPI: `<job>-mpi-ssh-auth`, upstream's SSH keys for mpirun to reach the nodes (an
        immutable `kubernetes.io/ssh-auth` Secret: `ssh-privatekey` an ECDSA P-521 key,
        `ssh-publickey` its authorized_keys line), made once per TrainJob."""
        if _trainjob(job).resolved.policy != "mpi":
            return []
        keys = ecdsa_p521_key_pair()
        return [
            SecretData(
                name=ssh_auth_secret_name(job),
                type=SSH_AUTH_TYPE,
                data={SSH_PRIVATE_KEY: keys.private_pem, SSH_PUBLIC_KEY: keys.authorized_key},
            )
        ]

    def decorate_pod(self, job: AnyJob, rtype: str, index: int, spec: PodSpec) -> PodSpec:
        """Every pod: its name as hostname, the job's subdomain (an Indexed Job's pod under
        JobSet). An initializer fetching `pvc://`: the claim mounted (`_pvc_source`). A
        torchtune TrainJob's nodes: the Torch plugin's `tune run` command (`TorchTuneLaunch`,
        its rendezvous at node 0's JobSet DNS name, as for PET_MASTER_ADDR). MPI,
        as upstream's plugin: the SSH keys' Secret on the launcher's and nodes' pods, mounted
        at `sshAuthMountPath` in their `node` containers; the hostfile at /etc/mpi in the
        launcher's."""
        spec = spec.model_copy(
            update={"hostname": self.pod_name(job, rtype, index), "subdomain": self.subdomain(job)}
        )
        if rtype in (DATASET_INITIALIZER, MODEL_INITIALIZER):
            spec = _pvc_source(spec, rtype)
        resolved = _trainjob(job).resolved
        if resolved.torchtune is not None and rtype == NODE:
            command = resolved.torchtune.command(job.metadata.name, self.default_port)
            spec = _with_node_command(spec, command)
        if resolved.policy != "mpi" or rtype not in (LAUNCHER, NODE):
            return spec
        volumes: list[dict[str, Any]] = [
            {
                "name": SSH_AUTH_VOLUME,
                "secret": {
                    "secretName": ssh_auth_secret_name(job),
                    "items": [{"key": key, "path": path} for key, path in SSH_KEY_FILES],
                },
            }
        ]
        mounts = [{"name": SSH_AUTH_VOLUME, "mountPath": resolved.ssh_auth_mount_path}]
        if rtype == LAUNCHER:
            volumes.append(
                {
                    "name": HOSTFILE_VOLUME,
                    "configMap": {
                        "name": hostfile_config_map_name(job),
                        "items": [{"key": HOSTFILE_NAME, "path": HOSTFILE_NAME, "mode": 0o444}],
                    },
                }
            )
            mounts.append({"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR})
        containers = []
        for container in spec.containers:
            if container.name == NODE:
                for mount in mounts:
                    container = _with_mount(container, mount)
            containers.append(container)
        return _with_volumes(spec.model_copy(update={"containers": containers}), volumes)

    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        """JobSet's successPolicy: every pod of the target replicated jobs (all by default)."""
        return all(all_succeeded(counts, t) for t in _trainjob(job).resolved.success_targets)
