"""`trainhub sandbox up|status|down`: a local Kafka broker and member clusters that outlive
the command, found again through a state file and stopped by PID."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from bus.kafka_settings import KafkaSettings
from trainhub_sandbox.cache import default_cache_dir
from trainhub_sandbox.errors import SandboxError
from trainhub_sandbox.kafka_broker import KafkaBroker, start_kafka, stop_kafka
from trainhub_sandbox.kafka_cluster import KafkaCluster, start_kafka_cluster, stop_kafka_cluster
from trainhub_sandbox.kafka_users import grant, role_users, write_configs
from trainhub_sandbox.kube_cluster import (
    KubeSandbox,
    MemberClusterPlan,
    load_state,
    start_apiserver,
    start_member_clusters,
    stop_apiserver,
    stop_member_clusters,
    write_state,
)
from trainhub_sandbox.processes import is_running

STATE = "sandbox.json"
SCRAM_USER = "trainhub"


def sandbox_dir() -> Path:
    """Where the running sandbox keeps its data and state (`TRAINHUB_SANDBOX_DIR`)."""
    configured = os.environ.get("TRAINHUB_SANDBOX_DIR")
    return Path(configured) if configured else default_cache_dir() / "run"


@dataclass(frozen=True)
class SandboxState:
    kafka: dict[str, Any]
    clusters: list[dict[str, Any]]

    def public(self) -> dict[str, Any]:
        """What `trainhub sandbox status -o json` prints."""
        return {"kafka": self.kafka, "clusters": self.clusters}

    def broker_pids(self) -> list[int]:
        """Every Kafka node's PID (a state file from before `--brokers` has only `pid`)."""
        nodes = self.kafka.get("brokers") or [{"pid": self.kafka["pid"]}]
        return [int(node["pid"]) for node in nodes]

    @property
    def replication(self) -> int:
        """The replication factor trainhub's topics should have on this sandbox."""
        return int(self.kafka.get("replication", 1))


def read_state(root: Path | None = None) -> SandboxState | None:
    path = (root or sandbox_dir()) / STATE
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return SandboxState(kafka=data["kafka"], clusters=data["clusters"])


def cluster_plans(count: int, clusters_file: Path | None) -> list[MemberClusterPlan]:
    if clusters_file is not None:
        data = yaml.safe_load(clusters_file.read_text()) or {}
        return [MemberClusterPlan.from_mapping(c) for c in data.get("clusters", [])]
    return [MemberClusterPlan(name=f"cluster-{i + 1}") for i in range(count)]


def sandbox_up(
    count: int = 0,
    clusters_file: Path | None = None,
    *,
    acls: bool = False,
    acl_clusters: Sequence[str] = (),
    brokers: int = 1,
    gang_scheduler: str | None = None,
    training_operator: bool = False,
    kubeflow_crds: bool = False,
    garbage_collector: bool = False,
) -> SandboxState:
    """Start the broker (with a SCRAM user) and `count` member clusters; refuse if running.

    `brokers` > 1: a cluster of that many KRaft nodes (kafka_cluster.py); its bootstrap lists
    them all, and `replication` in the state says what `--replication` trainhub's topics
    should get there (3 from three brokers on, with min.insync.replicas 2).

    `acls`: the broker authorises every request; the SCRAM user is its only super user, and
    the hub, the producers and a worker per cluster (`acl_clusters`, else the member
    clusters, else `cluster-1`) get users of their own with exactly their role's ACLs and
    a `--config` file each (kafka/users/<user>.yaml).

    `gang_scheduler` (`scheduler-plugins`): every member cluster also runs scheduler-plugins'
    scheduler with Coscheduling, and its worker identity may make PodGroups.

    `training_operator`: every member cluster also runs the Kubeflow Training Operator, and
    its worker identity may hand it jobs (delegate mode). `kubeflow_crds`: only its CRDs are
    installed (each direct-mode job gets its own object there). `garbage_collector`: every
    member cluster also runs kube-controller-manager's garbage collector."""
    root = sandbox_dir()
    existing = read_state(root)
    if brokers < 1:
        raise ValueError(f"--brokers must be at least 1; got {brokers}")
    if existing is not None and any(is_running(pid) for pid in existing.broker_pids()):
        raise SandboxError(
            f"a sandbox is already running (state in {root}); run `trainhub sandbox down`"
        )
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    password = os.urandom(12).hex()
    specs = cluster_plans(count, clusters_file)
    if gang_scheduler is not None:
        specs = [replace(spec, gang_scheduler=gang_scheduler) for spec in specs]
    if training_operator:
        specs = [replace(spec, training_operator=True) for spec in specs]
    if kubeflow_crds:
        specs = [replace(spec, kubeflow_crds=True) for spec in specs]
    if garbage_collector:
        specs = [replace(spec, garbage_collector=True) for spec in specs]
    served = list(acl_clusters) or [spec.name for spec in specs] or ["cluster-1"]
    users = role_users(served) if acls else []
    passwords = {SCRAM_USER: password, **{user.name: os.urandom(12).hex() for user in users}}
    if brokers == 1:
        broker = start_kafka(root / "kafka", scram_users=passwords, authorizer=acls)
        kafka_cluster = KafkaCluster((broker,))
    else:
        kafka_cluster = start_kafka_cluster(
            root / "kafka", brokers, scram_users=passwords, authorizer=acls
        )
    first = kafka_cluster.brokers[0]
    kafka: dict[str, Any] = {
        "bootstrap": kafka_cluster.bootstrap,
        "pid": first.pid,
        "log": str(first.log_path),
        "sasl_bootstrap": kafka_cluster.sasl_bootstrap,
        "sasl_username": SCRAM_USER,
        "sasl_password": password,
        "replication": min(brokers, 3),
        "brokers": [_broker_entry(broker) for broker in kafka_cluster.brokers],
    }
    if users:
        assert kafka_cluster.sasl_bootstrap is not None
        admin = KafkaSettings(
            bootstrap=kafka_cluster.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_username=SCRAM_USER,
            sasl_password=password,
        )
        try:
            grant(admin, users)
        except Exception:
            stop_kafka_cluster(kafka_cluster)
            raise
        folder = root / "kafka" / "users"
        kafka["users"] = write_configs(folder, kafka_cluster.sasl_bootstrap, passwords, users)
    clusters: list[dict[str, Any]] = []
    if specs:
        try:
            kube = start_member_clusters(specs, root / "kube")
        except Exception:
            stop_kafka_cluster(kafka_cluster)
            raise
        write_state(kube)
        for cluster in kube.clusters.values():
            clusters.append(
                {
                    "name": cluster.name,
                    "kubeconfig": str(cluster.admin_kubeconfig),
                    "context": cluster.admin_context,
                    "workerKubeconfig": str(cluster.worker_kubeconfig),
                    "workerContext": cluster.worker_context,
                    "namespaces": list(cluster.worker_namespaces),
                    "gangScheduler": cluster.gang_scheduler,
                    "trainingOperator": cluster.training_operator,
                    "kubeflowCrds": cluster.kubeflow_crds,
                    "garbageCollector": cluster.garbage_collector,
                }
            )
    state = SandboxState(kafka=kafka, clusters=clusters)
    (root / STATE).write_text(json.dumps({"kafka": kafka, "clusters": clusters}, indent=2) + "\n")
    return state


def sandbox_down() -> list[str]:
    """Stop everything the sandbox started, by PID; returns what was stopped."""
    root = sandbox_dir()
    state = read_state(root)
    stopped: list[str] = []
    if (root / "kube" / "state.json").exists():
        stop_member_clusters(load_state(root / "kube"))
        stopped.append("member clusters")
    if state is not None:
        running = [pid for pid in state.broker_pids() if is_running(pid)]
        # All at once: a quorum's last nodes would otherwise wait out their grace period.
        with ThreadPoolExecutor(max_workers=max(len(running), 1)) as pool:
            list(pool.map(stop_kafka, running))
        if running:
            stopped.append(f"kafka (pid{'s' if len(running) > 1 else ''} {_pids(running)})")
        (root / STATE).unlink()
    return stopped


def _broker_entry(broker: KafkaBroker) -> dict[str, Any]:
    return {
        "nodeId": broker.node_id,
        "bootstrap": broker.bootstrap,
        "saslBootstrap": broker.sasl_bootstrap,
        "pid": broker.pid,
        "log": str(broker.log_path),
    }


def _pids(pids: Sequence[int]) -> str:
    return ", ".join(str(pid) for pid in pids)


def _running_clusters() -> KubeSandbox:
    state = sandbox_dir() / "kube"
    if not (state / "state.json").exists():
        raise SandboxError("no member clusters are running; start them with `trainhub sandbox up`")
    return load_state(state)


def apiserver_down(cluster: str) -> str:
    """Kill one member cluster's kube-apiserver (an outage, for failover drills); its
    scheduler and kwok keep running. Returns what was stopped."""
    process = stop_apiserver(_running_clusters(), cluster)
    return f"kube-apiserver of {cluster} (pid {process.pid})"


def apiserver_up(cluster: str) -> str:
    """Start a killed kube-apiserver again with its original flags, once it answers /readyz;
    the state file records its new PID so that `sandbox down` stops it."""
    member = start_apiserver(_running_clusters(), cluster)
    pid = next(p.pid for p in member.processes if p.name == "kube-apiserver")
    return f"kube-apiserver of {cluster} (pid {pid}) at {member.server}"
