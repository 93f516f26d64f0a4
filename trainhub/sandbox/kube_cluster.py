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
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from trainhub.member_rbac import WORKER_USER, namespace_manifest, worker_rbac
from trainhub.sandbox.errors import SandboxError
from trainhub.sandbox.kube_api import ApiClient
from trainhub.sandbox.kube_build import KubeBinaries, build_kube_binaries

__all__ = [
    "DEFAULT_STAGES",
    "STATE_FILE",
    "WORKER_USER",
    "ApiClient",
    "ClusterSpec",
    "KubeSandbox",
    "MemberCluster",
    "NodePool",
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

DEFAULT_STAGES = Path(__file__).resolve().parents[2] / "deploy" / "sandbox" / "kube" / "stages.yaml"
STATE_FILE = "state.json"

_APISERVER = "kube-apiserver"
_SCHEDULER_USER = "system:kube-scheduler"
_KWOK_USER = "kwok-controller"
_SERVICE_CIDR = "10.0.0.0/24"
_POD_CIDR = "10.244.0.0/16"
_POLL_SECONDS = 0.25
_LOG_TAIL_LINES = 30


@dataclass(frozen=True)
class NodeTaint:
    key: str
    effect: str = "NoSchedule"
    value: str = ""


@dataclass(frozen=True)
class NodePool:
    """`count` identical fake nodes named `<cluster>-<name>-<i>`."""

    count: int = 2
    cpu: str = "8"
    memory: str = "32Gi"
    pods: int = 110
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[NodeTaint, ...] = ()
    name: str = "node"


@dataclass(frozen=True)
class ClusterSpec:
    """One member cluster: its fake nodes and the namespaces its worker identity may use."""

    name: str
    pools: tuple[NodePool, ...] = (NodePool(),)
    worker_namespaces: tuple[str, ...] = ("default",)
    apiserver_args: tuple[str, ...] = ()
    """Extra kube-apiserver flags, e.g. `--watch-cache=false` to serve watches from etcd."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ClusterSpec:
        """Build from plain data, e.g. YAML: `{name, pools: [{count, cpu, ..., taints: [...]}]}`."""
        pools = tuple(
            NodePool(**{**pool, "taints": tuple(NodeTaint(**t) for t in pool.get("taints", ()))})
            for pool in data.get("pools", [{}])
        )
        namespaces = tuple(data.get("worker_namespaces", ("default",)))
        extra = tuple(data.get("apiserver_args", ()))
        return cls(
            name=data["name"], pools=pools, worker_namespaces=namespaces, apiserver_args=extra
        )


@dataclass(frozen=True)
class SandboxProcess:
    """A process we started; `start_ticks` (from /proc) guards against a recycled PID."""

    name: str
    pid: int
    start_ticks: int | None
    log: Path
    args: tuple[str, ...] = ()
    """The command line, so that a stopped process can be started again the same way."""


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


@dataclass
class KubeSandbox:
    """The shared etcd and the member clusters on it; also written to `<workdir>/state.json`."""

    workdir: Path
    etcd_url: str
    etcd: SandboxProcess
    clusters: dict[str, MemberCluster] = field(default_factory=dict)
    children: dict[int, subprocess.Popen[bytes]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def processes(self) -> list[SandboxProcess]:
        """Every process, in the order to stop them: kwok, scheduler, apiserver; etcd last."""
        ordered = [p for c in self.clusters.values() for p in reversed(c.processes)]
        return [*ordered, self.etcd]


def start_member_clusters(
    specs: Sequence[ClusterSpec],
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
    children: dict[int, subprocess.Popen[bytes]] = {}
    try:
        sandbox = _start_etcd(bins, workdir, children, deadline)
        _start_clusters(sandbox, specs, bins, stages, deadline)
    except BaseException:
        for child in children.values():
            _stop_child(child, grace=5.0)
        raise
    write_state(sandbox)
    log.info("sandbox: %d cluster(s) ready in %.1fs", len(specs), time.monotonic() - started)
    return sandbox


def _refuse_running_sandbox(workdir: Path) -> None:
    """Starting again would wipe the data of a sandbox that still runs there."""
    if not (workdir / STATE_FILE).is_file():
        return
    running = [p for p in load_state(workdir).processes() if _is_running(p)]
    if running:
        pids = ", ".join(f"{p.name} {p.pid}" for p in running)
        raise SandboxError(f"a sandbox still runs in {workdir} ({pids}); stop it first")


def stop_member_clusters(sandbox: KubeSandbox, grace: float = 10.0) -> None:
    """Stop every sandbox process by its PID: SIGTERM, then SIGKILL after `grace` seconds."""
    for process in sandbox.processes():
        child = sandbox.children.get(process.pid)
        if child is not None:
            _stop_child(child, grace)
        else:
            _stop_foreign(process, grace)
    sandbox.children.clear()
    log.info("sandbox stopped: %s", sandbox.workdir)


# --- faults: one cluster's apiserver goes away and comes back --------------------------------


def stop_apiserver(
    sandbox: KubeSandbox, cluster: str, *, sig: signal.Signals = signal.SIGKILL
) -> SandboxProcess:
    """Stop one member cluster's kube-apiserver, by default as an outage (SIGKILL: no
    graceful shutdown); its scheduler and kwok keep running and reconnect once it is started
    again with `start_apiserver`. Returns the stopped process."""
    process = _apiserver_of(sandbox, cluster)
    if not _is_running(process):
        raise SandboxError(f"the kube-apiserver of {cluster} is not running (pid {process.pid})")
    child = sandbox.children.get(process.pid)
    if child is not None:
        child.send_signal(sig)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired as exc:
            raise SandboxError(f"the kube-apiserver of {cluster} survived {sig.name}") from exc
        del sandbox.children[process.pid]
    else:
        os.kill(process.pid, sig)
        end = time.monotonic() + 30
        while _is_running(process):
            if time.monotonic() > end:
                raise SandboxError(f"the kube-apiserver of {cluster} survived {sig.name}")
            time.sleep(0.05)
    log.info("stopped the kube-apiserver of %s (%s)", cluster, sig.name)
    return process


def start_apiserver(sandbox: KubeSandbox, cluster: str, *, timeout: float = 60.0) -> MemberCluster:
    """Start a stopped kube-apiserver again with its original flags (same port, certificate,
    tokens and etcd prefix, so every kubeconfig still works); return the cluster, updated
    with the new PID and recorded in the state file, once `/readyz` answers 200."""
    old = _apiserver_of(sandbox, cluster)
    member = sandbox.clusters[cluster]
    if _is_running(old):
        raise SandboxError(f"the kube-apiserver of {cluster} still runs (pid {old.pid})")
    if not old.args:
        raise SandboxError(f"no command line recorded for the kube-apiserver of {cluster}")
    process = _spawn(_APISERVER, list(old.args), old.log, sandbox.children)
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
        etcd=_process_from_state(state["etcd"]),
        clusters={cluster.name: cluster for cluster in clusters},
    )


def node_manifests(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The v1.Node objects for `spec`, with capacity, labels and taints; kwok manages them."""
    nodes = []
    for pool in spec.pools:
        resources = {"cpu": pool.cpu, "memory": pool.memory, "pods": str(pool.pods)}
        if pool.gpus:
            resources["nvidia.com/gpu"] = str(pool.gpus)
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
    children: dict[int, subprocess.Popen[bytes]],
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
    etcd = _spawn("etcd", args, workdir / "etcd.log", children)
    sandbox = KubeSandbox(workdir=workdir, etcd_url=client_url, etcd=etcd, children=children)
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

    spec: ClusterSpec
    dir: Path
    port: int
    tokens: dict[str, str]
    apiserver: SandboxProcess


def _start_clusters(
    sandbox: KubeSandbox,
    specs: Sequence[ClusterSpec],
    bins: KubeBinaries,
    stages: Path,
    deadline: float,
) -> None:
    keys = _service_account_keys(sandbox.workdir)
    pending = [_launch_apiserver(sandbox, spec, bins, keys, deadline) for spec in specs]
    for cluster in pending:
        server = f"https://127.0.0.1:{cluster.port}"
        ca_file = cluster.dir / "certs" / "apiserver.crt"
        admin = ApiClient(server, cluster.tokens["admin"], ca_file)
        _wait_until(
            partial(_apiserver_ready, admin, ca_file), deadline, cluster.apiserver, "/readyz"
        )
        _bootstrap(admin, cluster.spec)
    launched = [_launch_workers(sandbox, cluster, bins, stages) for cluster in pending]
    for member in launched:
        _wait_until(
            partial(_nodes_ready, ApiClient.for_cluster(member), member.node_names),
            deadline,
            member.processes[-1],
            f"{len(member.node_names)} nodes Ready",
        )
        sandbox.clusters[member.name] = member
        log.info("member cluster %s ready at %s", member.name, member.server)


def _launch_apiserver(
    sandbox: KubeSandbox,
    spec: ClusterSpec,
    bins: KubeBinaries,
    keys: tuple[Path, Path],
    deadline: float,
) -> _Pending:
    cluster_dir = sandbox.workdir / spec.name
    shutil.rmtree(cluster_dir, ignore_errors=True)
    (cluster_dir / "certs").mkdir(parents=True)
    tokens = {role: secrets.token_hex(16) for role in ("admin", "worker", "scheduler", "kwok")}
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
        # No kube-controller-manager runs, so nothing would lift the not-ready taint that
        # TaintNodesByCondition puts on new nodes, nor create service account tokens.
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        *spec.apiserver_args,
    ]
    process = _spawn(_APISERVER, args, cluster_dir / "kube-apiserver.log", sandbox.children)
    return _Pending(spec=spec, dir=cluster_dir, port=port, tokens=tokens, apiserver=process)


def _launch_workers(
    sandbox: KubeSandbox, cluster: _Pending, bins: KubeBinaries, stages: Path
) -> MemberCluster:
    """Write the kubeconfigs, then start kube-scheduler and kwok against the ready apiserver."""
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
        "kube-scheduler",
        _scheduler_args(bins, kubeconfigs["scheduler"], scheduler_port),
        cluster_dir / "kube-scheduler.log",
        sandbox.children,
    )
    kwok = _spawn(
        "kwok",
        _kwok_args(bins, kubeconfigs["kwok"], stages, kwok_port),
        cluster_dir / "kwok.log",
        sandbox.children,
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
        processes=(cluster.apiserver, scheduler, kwok),
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


def _bootstrap(admin: ApiClient, spec: ClusterSpec) -> None:
    """Namespaces, the worker's RBAC and the fake nodes."""
    for namespace in spec.worker_namespaces:
        admin.ensure("/api/v1/namespaces", namespace_manifest(namespace))
    for path, body in worker_rbac(spec.worker_namespaces):
        admin.ensure(path, body)
    for node in node_manifests(spec):
        admin.ensure("/api/v1/nodes", node)


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
        if not _is_running(process):
            raise SandboxError(f"{process.name} exited waiting for {what}\n{_log_tail(process)}")
        if time.monotonic() > deadline:
            raise SandboxError(f"timed out waiting for {what}\n{_log_tail(process)}")
        time.sleep(_POLL_SECONDS)


def _log_tail(process: SandboxProcess) -> str:
    try:
        lines = process.log.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {process.log})"
    return f"--- last lines of {process.log} ---\n" + "\n".join(lines[-_LOG_TAIL_LINES:])


# --- processes -------------------------------------------------------------------------------


def _spawn(
    name: str,
    args: list[str],
    log_path: Path,
    children: dict[int, subprocess.Popen[bytes]],
    env: Mapping[str, str] | None = None,
) -> SandboxProcess:
    """Start a detached child (own session, so a test's Ctrl-C reaches us, not it)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as output:
        child = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    children[child.pid] = child
    log.debug("started %s pid %d: %s", name, child.pid, " ".join(args))
    return SandboxProcess(name, child.pid, _start_ticks(child.pid), log_path, tuple(args))


def _stop_child(child: subprocess.Popen[bytes], grace: float) -> None:
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    child.send_signal(signal.SIGCONT)  # a paused process would hold the SIGTERM until resumed
    try:
        child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(timeout=grace)


def _stop_foreign(process: SandboxProcess, grace: float) -> None:
    """Stop a process another Python process started, only if its PID was not recycled."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _is_running(process):
            return
        try:
            os.kill(process.pid, sig)
            os.kill(process.pid, signal.SIGCONT)  # a paused process would hold the SIGTERM
        except ProcessLookupError:
            return
        end = time.monotonic() + grace
        while _is_running(process) and time.monotonic() < end:
            time.sleep(0.1)
    if _is_running(process):
        raise SandboxError(f"{process.name} (pid {process.pid}) survived SIGKILL")


def _is_running(process: SandboxProcess) -> bool:
    """True while the PID exists, is not a zombie and is still the process we started."""
    try:
        stat = Path(f"/proc/{process.pid}/stat").read_text()
    except OSError:
        return _pid_exists(process.pid)
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return False
    return process.start_ticks is None or int(fields[19]) == process.start_ticks


def _pid_exists(pid: int) -> bool:
    if Path("/proc/self").exists():
        return False  # /proc works here, so a missing /proc/<pid> means the process is gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def free_ports(count: int) -> list[int]:
    """Distinct loopback ports free right now (held together so they differ)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


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


# --- state file ------------------------------------------------------------------------------


def _process_from_state(data: Mapping[str, Any]) -> SandboxProcess:
    return SandboxProcess(
        data["name"],
        data["pid"],
        data["start_ticks"],
        Path(data["log"]),
        tuple(data.get("args") or ()),
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
            values[key] = tuple(_process_from_state(p) for p in value)
        else:
            values[key] = value
    return MemberCluster(**values)
