"""Start and stop real Kubernetes member clusters for tests: one shared etcd, and per cluster a
kube-apiserver, a kube-scheduler and kwok simulating the nodes and the pods' lifecycles.

Everything runs from the binaries `kube_build` builds; nothing needs Docker or kubectl.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from trainhub.member_rbac import WORKER_USER, namespace_manifest, worker_rbac
from trainhub_sandbox import processes
from trainhub_sandbox.controller_manager import (
    CONTROLLER_MANAGER_USER,
    controller_manager_args,
    controller_manager_ready,
)
from trainhub_sandbox.controller_manager import PROCESS_NAME as CONTROLLER_MANAGER
from trainhub_sandbox.errors import SandboxError
from trainhub_sandbox.kube_api import ApiClient
from trainhub_sandbox.kube_build import KubeBinaries, build_controller_manager, build_kube_binaries
from trainhub_sandbox.kube_model import (
    STATE_FILE,
    KubeSandbox,
    KwokNodeGroup,
    MemberCluster,
    MemberClusterPlan,
    NodeTaint,
    load_state,
    write_state,
)
from trainhub_sandbox.processes import SandboxProcess, free_ports, is_running, spawn
from trainhub_sandbox.scheduler_plugins import (
    GANG_SCHEDULER,
    PROCESS_NAME,
    SchedulerPlugins,
    build_scheduler_plugins,
    scheduler_args,
    scheduler_config,
    scheduler_rbac,
)
from trainhub_sandbox.training_operator import (
    OPERATOR_USER,
    OperatorPorts,
    TrainingOperator,
    build_training_operator,
    install_certs,
    operator_args,
    operator_objects,
    operator_ready,
)
from trainhub_sandbox.training_operator import PROCESS_NAME as OPERATOR_PROCESS

__all__ = [
    "DEFAULT_STAGES",
    "STATE_FILE",
    "WORKER_USER",
    "ApiClient",
    "KubeSandbox",
    "KwokNodeGroup",
    "MemberCluster",
    "MemberClusterPlan",
    "NodeTaint",
    "SandboxProcess",
    "free_ports",
    "load_state",
    "node_manifests",
    "pause_apiserver",
    "resume_apiserver",
    "start_apiserver",
    "start_member_clusters",
    "stop_apiserver",
    "stop_member_clusters",
    "write_state",
]

log = logging.getLogger(__name__)

# Package data: kwok's stages (node and pod lifecycles, ours for bare pods among them).
DEFAULT_STAGES = Path(__file__).resolve().parent / "data" / "kube" / "stages.yaml"

_APISERVER = "kube-apiserver"
_SCHEDULER_USER = "system:kube-scheduler"
_KWOK_USER = "kwok-controller"
_SERVICE_CIDR = "10.0.0.0/24"
_POD_CIDR = "10.244.0.0/16"
_POLL_SECONDS = 0.25
_LOG_TAIL_LINES = 30
_OPERATOR_NODE_STORAGE = "100Gi"
"""ephemeral-storage of a node on a cluster running the Training Operator, which asks 5Gi of
it for an MPIJob launcher's kubectl-delivery init container (nowhere to go without)."""


def start_member_clusters(
    specs: Sequence[MemberClusterPlan],
    workdir: Path,
    *,
    binaries: KubeBinaries | None = None,
    stages: Path = DEFAULT_STAGES,
    timeout: float = 120.0,
) -> KubeSandbox:
    """Start one etcd and every cluster in `specs`; return once all their nodes are Ready.

    On failure everything started so far is stopped and SandboxError carries the log tail.
    """
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise SandboxError(f"cluster names must be unique, got {names}")
    _refuse_running_sandbox(workdir)
    bins = binaries or build_kube_binaries()
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + timeout
    launched: list[SandboxProcess] = []
    try:
        sandbox = _start_etcd(bins, workdir, launched, deadline)
        _start_clusters(sandbox, specs, bins, stages, deadline)
    except BaseException:
        for process in launched:
            processes.stop(process, grace=5.0, kill_grace=5.0)
        raise
    write_state(sandbox)
    log.info("sandbox: %d cluster(s) ready in %.1fs", len(specs), time.monotonic() - started)
    return sandbox


def _refuse_running_sandbox(workdir: Path) -> None:
    """Starting again would wipe the data of a sandbox that still runs there."""
    if not (workdir / STATE_FILE).is_file():
        return
    running = [p for p in load_state(workdir).processes() if is_running(p)]
    if running:
        pids = ", ".join(f"{p.name} {p.pid}" for p in running)
        raise SandboxError(f"a sandbox still runs in {workdir} ({pids}); stop it first")


def stop_member_clusters(sandbox: KubeSandbox, grace: float = 10.0) -> None:
    """Stop every sandbox process by its PID: SIGTERM, then SIGKILL after `grace` seconds."""
    for process in sandbox.processes():
        processes.stop(process, grace=grace, kill_grace=grace)
    sandbox.launched.clear()
    log.info("sandbox stopped: %s", sandbox.workdir)


# --- faults: one cluster's apiserver goes away and comes back --------------------------------


def stop_apiserver(
    sandbox: KubeSandbox, cluster: str, *, sig: signal.Signals = signal.SIGKILL
) -> SandboxProcess:
    """Stop one member cluster's kube-apiserver, by default as an outage (SIGKILL: no
    graceful shutdown); its scheduler and kwok keep running and reconnect once it is started
    again with `start_apiserver`. Returns the stopped process."""
    process = _apiserver_of(sandbox, cluster)
    if not is_running(process):
        raise SandboxError(f"the kube-apiserver of {cluster} is not running (pid {process.pid})")
    processes.send_signal(process, sig)
    if not processes.wait_gone(process, 30):
        raise SandboxError(f"the kube-apiserver of {cluster} survived {sig.name}")
    log.info("stopped the kube-apiserver of %s (%s)", cluster, sig.name)
    return process


def start_apiserver(sandbox: KubeSandbox, cluster: str, *, timeout: float = 60.0) -> MemberCluster:
    """Start a stopped kube-apiserver again with its original flags (same port, certificate,
    tokens and etcd prefix, so every kubeconfig still works); return the cluster, updated
    with the new PID and recorded in the state file, once `/readyz` answers 200."""
    old = _apiserver_of(sandbox, cluster)
    member = sandbox.clusters[cluster]
    if is_running(old):
        raise SandboxError(f"the kube-apiserver of {cluster} still runs (pid {old.pid})")
    if not old.args:
        raise SandboxError(f"no command line recorded for the kube-apiserver of {cluster}")
    process = _spawn(sandbox, _APISERVER, list(old.args), old.log)
    admin = ApiClient.for_cluster(member)
    _wait_until(
        partial(_apiserver_ready, admin, member.ca_file),
        time.monotonic() + timeout,
        process,
        f"{cluster}'s /readyz after a restart",
    )
    member = replace(
        member,
        processes=tuple(process if p.name == _APISERVER else p for p in member.processes),
    )
    sandbox.clusters[cluster] = member
    write_state(sandbox)
    log.info("restarted the kube-apiserver of %s (pid %d)", cluster, process.pid)
    return member


def pause_apiserver(sandbox: KubeSandbox, cluster: str) -> SandboxProcess:
    """Freeze one cluster's kube-apiserver (SIGSTOP): connections are accepted by the kernel
    but nothing answers, as with a hung or partitioned control plane."""
    process = _apiserver_of(sandbox, cluster)
    os.kill(process.pid, signal.SIGSTOP)
    log.info("paused the kube-apiserver of %s", cluster)
    return process


def resume_apiserver(sandbox: KubeSandbox, cluster: str) -> SandboxProcess:
    """Let a paused kube-apiserver run again (SIGCONT); what it held is answered then."""
    process = _apiserver_of(sandbox, cluster)
    os.kill(process.pid, signal.SIGCONT)
    log.info("resumed the kube-apiserver of %s", cluster)
    return process


def _apiserver_of(sandbox: KubeSandbox, cluster: str) -> SandboxProcess:
    member = sandbox.clusters.get(cluster)
    if member is None:
        raise SandboxError(f"no member cluster {cluster!r} (have {', '.join(sandbox.clusters)})")
    return next(p for p in member.processes if p.name == _APISERVER)


def node_manifests(spec: MemberClusterPlan) -> list[dict[str, Any]]:
    """The v1.Node objects for `spec`, with capacity, labels and taints; kwok manages them."""
    nodes = []
    for pool in spec.pools:
        resources = {"cpu": pool.cpu, "memory": pool.memory, "pods": str(pool.pods)}
        if pool.gpus:
            resources["nvidia.com/gpu"] = str(pool.gpus)
        storage = pool.ephemeral_storage
        if storage is None and spec.training_operator:
            storage = _OPERATOR_NODE_STORAGE
        if storage is not None:
            resources["ephemeral-storage"] = storage
        for index in range(pool.count):
            name = f"{spec.name}-{pool.name}-{index}"
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **pool.labels,
            }
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                    },
                    "spec": {"taints": [_taint(taint) for taint in pool.taints]},
                    "status": {"capacity": resources, "allocatable": resources},
                }
            )
    return nodes


# --- etcd ------------------------------------------------------------------------------------


def _start_etcd(
    bins: KubeBinaries,
    workdir: Path,
    launched: list[SandboxProcess],
    deadline: float,
) -> KubeSandbox:
    client_port, peer_port = free_ports(2)
    client_url = f"http://127.0.0.1:{client_port}"
    peer_url = f"http://127.0.0.1:{peer_port}"
    data_dir = workdir / "etcd"
    shutil.rmtree(data_dir, ignore_errors=True)
    args = [
        str(bins.etcd),
        "--name=sandbox",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=sandbox={peer_url}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]
    etcd = spawn("etcd", args, workdir / "etcd.log")
    launched.append(etcd)
    sandbox = KubeSandbox(workdir=workdir, etcd_url=client_url, etcd=etcd, launched=launched)
    _wait_until(lambda: _etcd_healthy(client_url), deadline, etcd, "etcd /health")
    return sandbox


def _etcd_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return bool(json.loads(response.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


# --- one member cluster ----------------------------------------------------------------------


@dataclass
class _Pending:
    """A cluster whose apiserver is starting; the rest follows once it is ready."""

    spec: MemberClusterPlan
    dir: Path
    port: int
    tokens: dict[str, str]
    apiserver: SandboxProcess


def _start_clusters(
    sandbox: KubeSandbox,
    specs: Sequence[MemberClusterPlan],
    bins: KubeBinaries,
    stages: Path,
    deadline: float,
) -> None:
    gangs = {spec.gang_scheduler for spec in specs} - {None}
    if gangs - {GANG_SCHEDULER}:
        raise SandboxError(f"the sandbox runs scheduler-plugins, not {', '.join(map(str, gangs))}")
    # Built (or found in the cache) before any apiserver starts: its first build takes minutes.
    plugins = build_scheduler_plugins() if gangs else None
    # Its CRDs come from the module the operator is built from (cached after a first build).
    wanted = any(spec.serves_kubeflow_jobs for spec in specs)
    operator = build_training_operator() if wanted else None
    collects = any(spec.garbage_collector for spec in specs)
    controller_manager = build_controller_manager() if collects else None
    keys = _service_account_keys(sandbox.workdir)
    pending = [_launch_apiserver(sandbox, spec, bins, keys, deadline) for spec in specs]
    for cluster in pending:
        server = f"https://127.0.0.1:{cluster.port}"
        ca_file = cluster.dir / "certs" / "apiserver.crt"
        admin = ApiClient(server, cluster.tokens["admin"], ca_file)
        _wait_until(
            partial(_apiserver_ready, admin, ca_file), deadline, cluster.apiserver, "/readyz"
        )
        _bootstrap(admin, cluster.spec, plugins, deadline, operator)
    launched = [_launch_workers(sandbox, cluster, bins, stages, plugins) for cluster in pending]
    for member in launched:
        _wait_until(
            partial(_nodes_ready, ApiClient.for_cluster(member), member.node_names),
            deadline,
            member.processes[-1],
            f"{len(member.node_names)} nodes Ready",
        )
        if controller_manager is not None and member.garbage_collector:
            member = _start_garbage_collector(sandbox, member, controller_manager, deadline)
        if operator is not None and member.training_operator:
            member = _start_operator(sandbox, member, operator, deadline)
        sandbox.clusters[member.name] = member
        log.info("member cluster %s ready at %s", member.name, member.server)


def _start_garbage_collector(
    sandbox: KubeSandbox, member: MemberCluster, binary: Path, deadline: float
) -> MemberCluster:
    """Run kube-controller-manager's garbage collector against the cluster (after its CRDs
    are established, so that it follows the Kubeflow kinds from its first discovery)."""
    cluster_dir = member.admin_kubeconfig.parent
    (port,) = free_ports(1)
    process = _spawn(
        sandbox,
        CONTROLLER_MANAGER,
        controller_manager_args(binary, cluster_dir / "controller-manager.kubeconfig", port),
        cluster_dir / "kube-controller-manager.log",
    )
    _wait_until(
        partial(controller_manager_ready, port), deadline, process, "kube-controller-manager"
    )
    log.info("garbage collector ready on %s (pid %d)", member.name, process.pid)
    return replace(member, processes=(*member.processes, process))


def _start_operator(
    sandbox: KubeSandbox, member: MemberCluster, operator: TrainingOperator, deadline: float
) -> MemberCluster:
    """Run the Training Operator against the cluster as its own user; return once its
    controllers start (its serving certificate copied out of the Secret its rotator fills)."""
    cluster_dir = member.admin_kubeconfig.parent
    ports = OperatorPorts(*free_ports(3))
    process = _spawn(
        sandbox,
        OPERATOR_PROCESS,
        operator_args(operator, cluster_dir / "operator.kubeconfig", ports),
        cluster_dir / "training-operator.log",
    )
    admin = ApiClient.for_cluster(member)
    _wait_until(
        lambda: install_certs(admin) and operator_ready(ports),
        deadline,
        process,
        "the Training Operator's certificates and /readyz",
    )
    log.info("training operator ready on %s (pid %d)", member.name, process.pid)
    return replace(member, processes=(*member.processes, process))


def _launch_apiserver(
    sandbox: KubeSandbox,
    spec: MemberClusterPlan,
    bins: KubeBinaries,
    keys: tuple[Path, Path],
    deadline: float,
) -> _Pending:
    cluster_dir = sandbox.workdir / spec.name
    shutil.rmtree(cluster_dir, ignore_errors=True)
    (cluster_dir / "certs").mkdir(parents=True)
    tokens = {
        role: secrets.token_hex(16)
        for role in ("admin", "worker", "scheduler", "kwok", "operator", "controller-manager")
    }
    token_file = cluster_dir / "tokens.csv"
    token_file.write_text(_token_file(tokens))
    token_file.chmod(0o600)
    (port,) = free_ports(1)
    private_key, public_key = keys
    args = [
        str(bins.kube_apiserver),
        f"--etcd-servers={sandbox.etcd_url}",
        f"--etcd-prefix=/clusters/{spec.name}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cluster_dir / 'certs'}",
        f"--token-auth-file={token_file}",
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={public_key}",
        f"--service-account-signing-key-file={private_key}",
        f"--service-cluster-ip-range={_SERVICE_CIDR}",
        # No node lifecycle or service account controller runs (a controller-manager, where
        # one does, runs only its garbage collector), so nothing would lift the not-ready
        # taint that TaintNodesByCondition puts on new nodes, nor create service account tokens.
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        *spec.apiserver_args,
    ]
    process = _spawn(sandbox, _APISERVER, args, cluster_dir / "kube-apiserver.log")
    return _Pending(spec=spec, dir=cluster_dir, port=port, tokens=tokens, apiserver=process)


def _launch_workers(
    sandbox: KubeSandbox,
    cluster: _Pending,
    bins: KubeBinaries,
    stages: Path,
    plugins: SchedulerPlugins | None = None,
) -> MemberCluster:
    """Write the kubeconfigs, then start kube-scheduler (and scheduler-plugins' beside it,
    where the plan asks for gangs) and kwok against the ready apiserver."""
    name, cluster_dir, tokens = cluster.spec.name, cluster.dir, cluster.tokens
    server = f"https://127.0.0.1:{cluster.port}"
    ca_file = cluster_dir / "certs" / "apiserver.crt"
    ca_data = ca_file.read_bytes()
    kubeconfigs = {
        role: _write_kubeconfig(cluster_dir / f"{role}.kubeconfig", name, role, server, ca_data, t)
        for role, t in tokens.items()
    }
    scheduler_port, kwok_port = free_ports(2)
    scheduler = _spawn(
        sandbox,
        "kube-scheduler",
        _scheduler_args(bins, kubeconfigs["scheduler"], scheduler_port),
        cluster_dir / "kube-scheduler.log",
    )
    schedulers = [scheduler]
    if cluster.spec.gang_scheduler == GANG_SCHEDULER and plugins is not None:
        config = cluster_dir / "scheduler-plugins.yaml"
        config.write_text(yaml.safe_dump(scheduler_config(plugins, kubeconfigs["scheduler"])))
        schedulers.append(
            _spawn(
                sandbox,
                PROCESS_NAME,
                scheduler_args(plugins, config),
                cluster_dir / "scheduler-plugins.log",
            )
        )
    kwok = _spawn(
        sandbox,
        "kwok",
        _kwok_args(bins, kubeconfigs["kwok"], stages, kwok_port),
        cluster_dir / "kwok.log",
        env={"HOME": str(cluster_dir / "kwok-home")},
    )
    return MemberCluster(
        name=name,
        server=server,
        ca_file=ca_file,
        admin_token=tokens["admin"],
        worker_token=tokens["worker"],
        admin_kubeconfig=kubeconfigs["admin"],
        worker_kubeconfig=kubeconfigs["worker"],
        admin_context=f"{name}-admin",
        worker_context=f"{name}-worker",
        worker_namespaces=cluster.spec.worker_namespaces,
        node_names=tuple(node["metadata"]["name"] for node in node_manifests(cluster.spec)),
        processes=(cluster.apiserver, *schedulers, kwok),
        gang_scheduler=cluster.spec.gang_scheduler,
        training_operator=cluster.spec.training_operator,
        kubeflow_crds=cluster.spec.serves_kubeflow_jobs,
        garbage_collector=cluster.spec.garbage_collector,
    )


def _scheduler_args(bins: KubeBinaries, kubeconfig: Path, port: int) -> list[str]:
    return [
        str(bins.kube_scheduler),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--profiling=false",
    ]


def _kwok_args(bins: KubeBinaries, kubeconfig: Path, stages: Path, port: int) -> list[str]:
    return [
        str(bins.kwok),
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=true",
        f"--cidr={_POD_CIDR}",
        "--node-ip=10.0.0.1",
        "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{port}",
    ]


def _token_file(tokens: Mapping[str, str]) -> str:
    users = {
        "admin": ("sandbox-admin", "system:masters"),
        "worker": (WORKER_USER, "trainhub:workers"),
        "scheduler": (_SCHEDULER_USER, ""),
        "kwok": (_KWOK_USER, "system:masters"),
        "operator": (OPERATOR_USER, ""),
        # The garbage collector reads and deletes every kind, CRDs' included (upstream gives
        # it its own service account bound to such a role; a master is the sandbox's stand-in).
        "controller-manager": (CONTROLLER_MANAGER_USER, "system:masters"),
    }
    return "".join(
        f'{tokens[role]},{user},{user},"{group}"\n' for role, (user, group) in users.items()
    )


def _write_kubeconfig(
    path: Path, cluster: str, role: str, server: str, ca_data: bytes, token: str
) -> Path:
    context = f"{cluster}-{role}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_data).decode(),
                },
            }
        ],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": context}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


# --- objects created through the API ---------------------------------------------------------


def _bootstrap(
    admin: ApiClient,
    spec: MemberClusterPlan,
    plugins: SchedulerPlugins | None = None,
    deadline: float = 0.0,
    operator: TrainingOperator | None = None,
) -> None:
    """Namespaces, the worker's RBAC and the fake nodes; with gangs, the PodGroup CRD (once
    established) and the second scheduler's RBAC; with the Training Operator, its CRDs (once
    established), namespace, Secret and RBAC; with only the CRDs, those."""
    delegation = spec.training_operator and operator is not None
    if spec.serves_kubeflow_jobs and operator is not None:
        for crd in operator.crd_manifests():
            _install_crd(admin, crd, deadline)
    if delegation:
        assert operator is not None
        for path, body in operator_objects(operator):
            admin.ensure(path, body)
    gangs = spec.gang_scheduler == GANG_SCHEDULER and plugins is not None
    if gangs:
        assert plugins is not None
        for crd in plugins.crd_manifests():
            _install_crd(admin, crd, deadline)
        for path, body in scheduler_rbac(_SCHEDULER_USER):
            admin.ensure(path, body)
    for namespace in spec.worker_namespaces:
        admin.ensure("/api/v1/namespaces", namespace_manifest(namespace))
    # A cluster with the operator serves a worker in either mode (a fleet may mix them).
    rbac = worker_rbac(
        spec.worker_namespaces,
        gang_scheduler=spec.gang_scheduler,
        delegation=delegation,
        direct=True,
    )
    for path, body in rbac:
        admin.ensure(path, body)
    for node in node_manifests(spec):
        admin.ensure("/api/v1/nodes", node)


def _install_crd(admin: ApiClient, crd: Mapping[str, Any], deadline: float) -> None:
    """Create the CRD and wait until the apiserver serves it (Established)."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    admin.ensure(path, crd)
    name = crd["metadata"]["name"]

    def established() -> bool:
        status, reply = admin.request("GET", f"{path}/{name}")
        conditions = (reply.get("status") or {}).get("conditions") or []
        return status == 200 and any(
            c.get("type") == "Established" and c.get("status") == "True" for c in conditions
        )

    while not established():
        if time.monotonic() > deadline:
            raise SandboxError(f"CRD {name} not established in time")
        time.sleep(_POLL_SECONDS)


def _taint(taint: NodeTaint) -> dict[str, str]:
    result = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        result["value"] = taint.value
    return result


# --- readiness -------------------------------------------------------------------------------


def _apiserver_ready(admin: ApiClient, ca_file: Path) -> bool:
    if not ca_file.is_file():
        return False
    try:
        status, _ = admin.request("GET", "/readyz")
    except (OSError, ssl.SSLError):
        return False
    return status == 200


def _nodes_ready(admin: ApiClient, names: Sequence[str]) -> bool:
    try:
        status, reply = admin.request("GET", "/api/v1/nodes")
    except OSError:
        return False
    ready = {
        node["metadata"]["name"]
        for node in reply.get("items", [])
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in node.get("status", {}).get("conditions", [])
        )
    }
    return status == 200 and set(names) <= ready


def _wait_until(
    check: Callable[[], bool], deadline: float, process: SandboxProcess, what: str
) -> None:
    """Poll `check` until it passes; fail early if `process` died, late if the deadline passed."""
    while not check():
        if not is_running(process):
            raise SandboxError(f"{process.name} exited waiting for {what}\n{_log_tail(process)}")
        if time.monotonic() > deadline:
            raise SandboxError(f"timed out waiting for {what}\n{_log_tail(process)}")
        time.sleep(_POLL_SECONDS)


def _log_tail(process: SandboxProcess) -> str:
    return processes.log_tail(process.log, _LOG_TAIL_LINES)


# --- processes -------------------------------------------------------------------------------


def _spawn(
    sandbox: KubeSandbox,
    name: str,
    args: list[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
) -> SandboxProcess:
    """Start one of the sandbox's processes (detached, its output in `log_path`)."""
    process = spawn(name, args, log_path, env=env)
    sandbox.launched.append(process)
    return process


def _service_account_keys(workdir: Path) -> tuple[Path, Path]:
    """An RSA key pair for service-account tokens, made once per sandbox with openssl."""
    private_key, public_key = workdir / "sa.key", workdir / "sa.pub"
    if private_key.is_file() and public_key.is_file():
        return private_key, public_key
    openssl = shutil.which("openssl")
    if openssl is None:
        raise SandboxError("the Kubernetes sandbox needs the openssl CLI for its service keys")
    commands = [
        [openssl, "genrsa", "-out", str(private_key), "2048"],
        [openssl, "rsa", "-in", str(private_key), "-pubout", "-out", str(public_key)],
    ]
    for command in commands:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise SandboxError(f"{' '.join(command)} failed: {result.stderr.strip()}")
    return private_key, public_key
