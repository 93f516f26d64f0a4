"""What the Kubernetes sandbox starts and what it leaves running: the plan of each member
cluster (its KWOK node groups), the running clusters, and the state file that records them so
that tests, the CLI and `stop` find them from another process.

Plain data, no processes: kube_api and kube_cluster both build on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainhub_sandbox.processes import SandboxProcess

STATE_FILE = "state.json"


@dataclass(frozen=True)
class NodeTaint:
    key: str
    effect: str = "NoSchedule"
    value: str = ""


@dataclass(frozen=True)
class KwokNodeGroup:
    """`count` identical fake nodes named `<cluster>-<name>-<i>`, which KWOK runs (the
    sandbox's nodes; not the workers' own NodePool)."""

    count: int = 2
    cpu: str = "8"
    memory: str = "32Gi"
    pods: int = 110
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[NodeTaint, ...] = ()
    name: str = "node"
    ephemeral_storage: str | None = None
    """The nodes' ephemeral-storage capacity (none: not reported, except on a cluster that
    runs the Training Operator, whose MPIJob launchers ask 5Gi of it)."""


@dataclass(frozen=True)
class MemberClusterPlan:
    """One sandbox member cluster to start: its fake node groups (`pools`) and the namespaces
    its worker identity may use (not the workers' own ClusterSpec)."""

    name: str
    pools: tuple[KwokNodeGroup, ...] = (KwokNodeGroup(),)
    worker_namespaces: tuple[str, ...] = ("default",)
    apiserver_args: tuple[str, ...] = ()
    """Extra kube-apiserver flags, e.g. `--watch-cache=false` to serve watches from etcd."""
    gang_scheduler: str | None = None
    """`scheduler-plugins`: its PodGroup CRD installed, its scheduler (Coscheduling) running
    beside kube-scheduler, and the worker identity allowed PodGroups."""
    training_operator: bool = False
    """The Kubeflow Training Operator v1 runs against this cluster (its CRDs installed), and
    the worker identity may hand it jobs (`trainhub worker --mode delegate`)."""
    kubeflow_crds: bool = False
    """The Training Operator's kubeflow.org CRDs are installed without the operator running
    (a direct-mode worker makes each job's own object there); implied by
    `training_operator`."""
    garbage_collector: bool = False
    """kube-controller-manager runs beside it with only its garbage collector: what a deleted
    owner (a job's CR) owned is deleted, as on a real cluster."""

    @property
    def serves_kubeflow_jobs(self) -> bool:
        return self.training_operator or self.kubeflow_crds

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> MemberClusterPlan:
        """Build from plain data, e.g. YAML: `{name, pools: [{count, cpu, ..., taints: [...]}]}`."""
        pools = tuple(
            KwokNodeGroup(
                **{**pool, "taints": tuple(NodeTaint(**t) for t in pool.get("taints", ()))}
            )
            for pool in data.get("pools", [{}])
        )
        namespaces = tuple(data.get("worker_namespaces", ("default",)))
        extra = tuple(data.get("apiserver_args", ()))
        return cls(
            name=data["name"],
            pools=pools,
            worker_namespaces=namespaces,
            apiserver_args=extra,
            gang_scheduler=data.get("gang_scheduler"),
            training_operator=bool(data.get("training_operator", False)),
            kubeflow_crds=bool(data.get("kubeflow_crds", False)),
            garbage_collector=bool(data.get("garbage_collector", False)),
        )


@dataclass(frozen=True)
class MemberCluster:
    """A running member cluster and how to reach it as admin or as the worker identity."""

    name: str
    server: str
    ca_file: Path
    admin_token: str
    worker_token: str
    admin_kubeconfig: Path
    worker_kubeconfig: Path
    admin_context: str
    worker_context: str
    worker_namespaces: tuple[str, ...]
    node_names: tuple[str, ...]
    processes: tuple[SandboxProcess, ...]
    gang_scheduler: str | None = None
    """The gang scheduler running there (`scheduler-plugins`), if any."""
    training_operator: bool = False
    """The Kubeflow Training Operator runs against it."""
    kubeflow_crds: bool = False
    """It serves the kubeflow.org job CRDs (with or without the operator)."""
    garbage_collector: bool = False
    """kube-controller-manager's garbage collector runs against it."""


@dataclass
class KubeSandbox:
    """The shared etcd and the member clusters on it; also written to `<workdir>/state.json`."""

    workdir: Path
    etcd_url: str
    etcd: SandboxProcess
    clusters: dict[str, MemberCluster] = field(default_factory=dict)
    launched: list[SandboxProcess] = field(default_factory=list, repr=False, compare=False)
    """What this Python process started for it: stopped again if the start fails."""

    def processes(self) -> list[SandboxProcess]:
        """Every process, in the order to stop them: kwok, schedulers, apiserver; etcd last."""
        ordered = [p for c in self.clusters.values() for p in reversed(c.processes)]
        return [*ordered, self.etcd]


def write_state(sandbox: KubeSandbox) -> Path:
    """Record ports, credentials and PIDs so tests, the CLI and `stop` find the sandbox."""
    state = {
        "workdir": str(sandbox.workdir),
        "etcd_url": sandbox.etcd_url,
        "etcd": asdict(sandbox.etcd),
        "clusters": [asdict(cluster) for cluster in sandbox.clusters.values()],
    }
    path = sandbox.workdir / STATE_FILE
    path.write_text(json.dumps(state, indent=2, default=str) + "\n")
    return path


def load_state(workdir: Path) -> KubeSandbox:
    """Read a sandbox another process started (its processes can then be stopped by PID)."""
    state = json.loads((workdir / STATE_FILE).read_text())
    clusters = [_cluster_from_state(data) for data in state["clusters"]]
    return KubeSandbox(
        workdir=Path(state["workdir"]),
        etcd_url=state["etcd_url"],
        etcd=SandboxProcess.from_state(state["etcd"]),
        clusters={cluster.name: cluster for cluster in clusters},
    )


def _cluster_from_state(data: Mapping[str, Any]) -> MemberCluster:
    paths = {"ca_file", "admin_kubeconfig", "worker_kubeconfig"}
    tuples = {"worker_namespaces", "node_names"}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in paths:
            values[key] = Path(value)
        elif key in tuples:
            values[key] = tuple(value)
        elif key == "processes":
            values[key] = tuple(SandboxProcess.from_state(p) for p in value)
        else:
            values[key] = value
    return MemberCluster(**values)
