"""MPIJob (v1): a launcher pod runs `mpirun`, worker pods wait; a ConfigMap carries the
hostfile and the `kubectl exec` agent through which mpirun reaches the workers, and the
launcher runs as a ServiceAccount of its own whose Role lets it exec into exactly those
workers. No Services."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from schemas.kubeflow import MPI_DELIVERY_RESOURCES, AnyJob, MPIJob
from schemas.pod import Container, EnvVar, PodSpec
from workers.frameworks.base import (
    AccessData,
    AccessRule,
    ConfigData,
    FrameworkAdapter,
    ReplicaCounts,
    all_succeeded,
    plain_env,
)
from workers.network import Network

CONFIG_VOLUME = "mpi-job-config"
CONFIG_MOUNT = "/etc/mpi"
KUBECTL_VOLUME = "mpi-job-kubectl"
KUBECTL_MOUNT = "/opt/kube"
KUBEXEC = "kubexec.sh"
HOSTFILE = "hostfile"
DISCOVER_HOSTS = "discover_hosts.sh"
KUBECTL_DELIVERY_IMAGE = "kubeflow/kubectl-delivery:latest"
_SCRIPT_MODE = 0o555
_HOSTFILE_MODE = 0o444


def _mpi(job: AnyJob) -> MPIJob:
    if not isinstance(job, MPIJob):
        raise TypeError(f"the MPIJob adapter got a {job.kind}")
    return job


def config_map_name(job: AnyJob) -> str:
    return f"{job.metadata.name}-config"


def launcher_name(job: AnyJob) -> str:
    """The launcher pod's name, also its ServiceAccount's, Role's and RoleBinding's."""
    return f"{job.metadata.name}-launcher"


def launcher_service_account(job: AnyJob) -> str:
    """The launcher template's own serviceAccountName, else `<job>-launcher` (upstream)."""
    own = getattr(job.replica_specs["Launcher"].template.spec, "serviceAccountName", None)
    return str(own) if own else launcher_name(job)


def has_gpu_launcher(job: AnyJob) -> bool:
    """Upstream's test: any launcher limit named `*.com/gpu` or containing `gpu`."""
    launcher = job.replica_specs["Launcher"].template.spec.containers
    return any(
        name.endswith(".com/gpu") or "gpu" in name
        for c in launcher
        for name in ((c.resources.limits or {}) if c.resources else {})
    )


_RSH_AGENT = "OMPI_MCA_plm_rsh_agent"


class MPIAdapter(FrameworkAdapter):
    schema = MPIJob
    default_restart_policy = "Never"
    creates_services = False
    injects_default_port = MPIJob.ADDS_DEFAULT_PORT
    env_in_every_container = False

    def pod_name(self, job: AnyJob, rtype: str, index: int) -> str:
        if rtype == "Launcher":
            return launcher_name(job)
        return f"{job.metadata.name}-worker-{index}"

    def labels_index(self, job: AnyJob, rtype: str) -> bool:
        return rtype != "Launcher"

    def main_container(self, job: AnyJob, rtype: str) -> str:
        names = [c.name for c in job.replica_specs[rtype].template.spec.containers]
        main = _mpi(job).spec.mainContainer
        if main in names:
            return main
        return self.default_container if self.default_container in names else names[0]

    def env_container(self, job: AnyJob, rtype: str) -> str:
        """The first container, as upstream's: the launcher's variables and mounts, and a
        worker's mounts and idle command, go there whatever `mainContainer` says (which
        names the container mpirun execs into)."""
        return job.replica_specs[rtype].template.spec.containers[0].name

    def is_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        return rtype == "Launcher"

    def environment(self, job: AnyJob, rtype: str, index: int, net: Network) -> list[EnvVar]:
        if rtype != "Launcher":
            return []
        env = {
            _RSH_AGENT: f"{CONFIG_MOUNT}/{KUBEXEC}",
            "OMPI_MCA_orte_default_hostfile": f"{CONFIG_MOUNT}/{HOSTFILE}",
        }
        if not has_gpu_launcher(job):
            # Keep a CPU launcher off the node's GPUs even where the runtime exposes them all.
            env |= {"NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": ""}
        main = self.env_container(job, rtype)
        own = {
            e.name
            for c in job.replica_specs[rtype].template.spec.containers
            if c.name == main
            for e in c.env or []
        }
        # Intel MPI's bootstrap is the one thing upstream lets the user choose, variable by
        # variable; every other value here holds over the user's.
        intel = {"I_MPI_HYDRA_BOOTSTRAP": "rsh", "I_MPI_HYDRA_BOOTSTRAP_EXEC": env[_RSH_AGENT]}
        env |= {name: value for name, value in intel.items() if name not in own}
        return plain_env(env)

    def config_maps(self, job: AnyJob, running: Collection[str] = ()) -> list[ConfigData]:
        """The hostfile names every worker; `discover_hosts.sh` (Horovod's elastic host
        discovery) only those Running now, sorted by name, as upstream rewrites it."""
        mpi = _mpi(job)
        slots = mpi.spec.slotsPerWorker or 1
        hosts = [self.pod_name(job, "Worker", i) for i in range(job.replicas_of("Worker"))]
        up = sorted(set(hosts) & set(running))
        if has_gpu_launcher(job):
            launcher = self.pod_name(job, "Launcher", 0)
            hosts.insert(0, launcher)
            up.insert(0, launcher)
        container = f" --container {mpi.spec.mainContainer}" if mpi.spec.mainContainer else ""
        kubexec = (
            "#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n"
            f'{KUBECTL_MOUNT}/kubectl exec ${{POD_NAME}}{container} -- /bin/sh -c "$*"'
        )
        return [
            ConfigData(
                name=config_map_name(job),
                labels={"app": job.metadata.name},
                data={
                    HOSTFILE: "".join(f"{h} slots={slots}\n" for h in hosts),
                    KUBEXEC: kubexec,
                    DISCOVER_HOSTS: "#!/bin/sh" + "".join(f"\necho {h}:{slots}" for h in up),
                },
            )
        ]

    def access(self, job: AnyJob) -> list[AccessData]:
        """Upstream's launcher Role: read pods, and exec into the job's workers by name."""
        workers = tuple(self.pod_name(job, "Worker", i) for i in range(job.replicas_of("Worker")))
        rules = [AccessRule(resources=("pods",), verbs=("get", "list", "watch"))]
        if workers:
            # Upstream writes this rule with no names when there are no workers, and a rule
            # without resourceNames grants exec into every pod of the namespace: left out.
            rules.append(
                AccessRule(resources=("pods/exec",), verbs=("create",), resource_names=workers)
            )
        return [
            AccessData(
                name=launcher_name(job),
                service_account=launcher_service_account(job),
                rules=tuple(rules),
                labels={"app": job.metadata.name},
            )
        ]

    def decorate_pod(self, job: AnyJob, rtype: str, index: int, spec: PodSpec) -> PodSpec:
        main = self.env_container(job, rtype)
        account: dict[str, Any] = {}
        if rtype == "Launcher":
            account["serviceAccountName"] = launcher_service_account(job)
        config_mount = {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT}
        if rtype == "Launcher":
            items = [(KUBEXEC, _SCRIPT_MODE), (HOSTFILE, _HOSTFILE_MODE)]
            items.append((DISCOVER_HOSTS, _SCRIPT_MODE))
            mounts = [{"name": KUBECTL_VOLUME, "mountPath": KUBECTL_MOUNT}, config_mount]
            volumes: list[dict[str, Any]] = [
                {"name": KUBECTL_VOLUME, "emptyDir": {}},
                self._config_volume(job, items),
            ]
            delivery = Container.model_validate(
                {
                    "name": "kubectl-delivery",
                    "image": KUBECTL_DELIVERY_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "env": [
                        {"name": "TARGET_DIR", "value": KUBECTL_MOUNT},
                        {"name": "NAMESPACE", "value": job.metadata.namespace},
                    ],
                    "volumeMounts": mounts,
                    "resources": {
                        "requests": dict(MPI_DELIVERY_RESOURCES),
                        "limits": dict(MPI_DELIVERY_RESOURCES),
                    },
                }
            )
            init: list[Container] | None = [*(spec.initContainers or []), delivery]
        else:
            mounts = [config_mount]
            volumes = [self._config_volume(job, [(KUBEXEC, _SCRIPT_MODE)])]
            init = spec.initContainers
        containers = []
        for container in spec.containers:
            if container.name == main:
                container = _with_mounts(container, mounts)
                if rtype == "Worker" and not container.command:
                    # mpirun execs into the worker; the pod itself only has to stay up.
                    idle = {"command": ["sleep"], "args": ["365d"]}
                    container = container.model_copy(update=idle)
            containers.append(container)
        own_volumes = list(getattr(spec, "volumes", None) or [])
        return spec.model_copy(
            update={
                "containers": containers,
                "initContainers": init,
                "volumes": [*own_volumes, *volumes],
                **account,
            }
        )

    @staticmethod
    def _config_volume(job: AnyJob, items: list[tuple[str, int]]) -> dict[str, Any]:
        return {
            "name": CONFIG_VOLUME,
            "configMap": {
                "name": config_map_name(job),
                "items": [{"key": k, "path": k, "mode": mode} for k, mode in items],
            },
        }

    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        return all_succeeded(counts, "Launcher")


def _with_mounts(container: Container, mounts: list[dict[str, Any]]) -> Container:
    own = list(getattr(container, "volumeMounts", None) or [])
    return container.model_copy(update={"volumeMounts": [*own, *mounts]})
