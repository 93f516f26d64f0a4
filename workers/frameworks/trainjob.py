"""TrainJob (Kubeflow Trainer v2): the replicated jobs its runtime resolved to, with what
upstream's runtime plugins add: torchrun's `PET_*` variables (Torch), the OpenMPI hostfile
and variables (MPI), and each Indexed Job pod's JOB_COMPLETION_INDEX (every plugin)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from schemas.kubeflow import AnyJob
from schemas.pod import EnvVar, PodSpec
from schemas.status import ReplicatedJobStatus
from schemas.trainer import LAUNCHER, NODE
from schemas.trainjob import TrainJob
from workers.frameworks.base import (
    ConfigData,
    FrameworkAdapter,
    ReplicaCounts,
    all_succeeded,
    plain_env,
)
from workers.network import Network

HOSTFILE_DIR = "/etc/mpi"
HOSTFILE_NAME = "hostfile"
HOSTFILE_VOLUME = "mpi-hostfile"
RSH_ARGS = "-o ConnectionAttempts=10"


def _trainjob(job: AnyJob) -> TrainJob:
    if not isinstance(job, TrainJob):
        raise TypeError(f"the TrainJob adapter got a {job.kind}")
    return job


def hostfile_config_map_name(job: AnyJob) -> str:
    return f"{job.metadata.name}-mpi-hostfile"


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
            master = self.pod_name(job, NODE, 0)
            # Upstream's Torch plugin: node 0's JobSet DNS hostname, `<job>-node-0-0.<job>`
            # (rendering maps it to the address a network without that DNS reaches it on).
            env |= {
                "PET_NNODES": str(resolved.num_nodes),
                "PET_NPROC_PER_NODE": resolved.proc_per_node,
                "PET_NODE_RANK": str(index),
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

    def decorate_pod(self, job: AnyJob, rtype: str, index: int, spec: PodSpec) -> PodSpec:
        # An Indexed Job's pod is `<job name>-<index>` as hostname; JobSet sets the subdomain.
        spec = spec.model_copy(
            update={"hostname": self.pod_name(job, rtype, index), "subdomain": self.subdomain(job)}
        )
        if _trainjob(job).resolved.policy != "mpi" or rtype != LAUNCHER:
            return spec
        main = self.env_container(job, rtype)
        mount = {"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR}
        containers = [
            c.model_copy(
                update={"volumeMounts": [*(c.model_extra or {}).get("volumeMounts", []), mount]}
            )
            if c.name == main
            else c
            for c in spec.containers
        ]
        volume: dict[str, Any] = {
            "name": HOSTFILE_VOLUME,
            "configMap": {
                "name": hostfile_config_map_name(job),
                "items": [{"key": HOSTFILE_NAME, "path": HOSTFILE_NAME, "mode": 0o444}],
            },
        }
        volumes = [*(spec.model_extra or {}).get("volumes", []), volume]
        return spec.model_copy(update={"containers": containers, "volumes": volumes})

    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        """JobSet's successPolicy: every pod of the target replicated jobs (all by default)."""
        return all(all_succeeded(counts, t) for t in _trainjob(job).resolved.success_targets)
