"""scheduler-plugins' scheduler with the Coscheduling plugin, beside a member cluster's own
kube-scheduler: built once from its Go module into the sandbox cache (with the PodGroup CRD and
the example scheduler configuration the module ships), configured and started per cluster.

v0.28.9 is the release the Training Operator v1.9 requires and the newest the Go module proxy
serves. It is built against Kubernetes 1.28 and runs as a second scheduler against the
sandbox's 1.36 apiserver: pods name it in `schedulerName`, every other pod is kube-scheduler's.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainhub_sandbox.cache import default_cache_dir
from trainhub_sandbox.errors import SandboxError
from trainhub_sandbox.kube_build import _build_flags, _go, _install, _is_current
from workers.gang_scheduling import DEFAULT_SCHEDULER_NAMES, POD_GROUP_APIS

SCHEDULER_PLUGINS_MODULE = "sigs.k8s.io/scheduler-plugins"
SCHEDULER_PLUGINS_VERSION = "v0.28.9"
SCHEDULER_NAME = DEFAULT_SCHEDULER_NAMES["scheduler-plugins"]  # scheduler-plugins-scheduler
"""The profile's schedulerName: what a worker with `--gang-scheduler scheduler-plugins` asks."""
GANG_SCHEDULER = "scheduler-plugins"
"""The `gang_scheduler` of a cluster plan (and of a worker) this scheduler serves."""
PROCESS_NAME = "scheduler-plugins"

_BINARY = "scheduler-plugins-scheduler"
_MANIFESTS = ("crd.yaml", "scheduler-config.yaml")
"""From the module's manifests/coscheduling/: the PodGroup CRD and Coscheduling's profile."""
PERMIT_WAITING_TIME_SECONDS = 10
"""How long a bound-ready pod waits at Permit for the rest of its gang (the module's example
configuration's value)."""


@dataclass(frozen=True)
class SchedulerPlugins:
    """The built scheduler and the manifests copied from its module."""

    scheduler: Path
    crd: Path
    config_template: Path

    def crd_manifests(self) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(self.crd.read_text()) if d]


def scheduler_plugins_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / f"scheduler-plugins-{SCHEDULER_PLUGINS_VERSION}"


def build_scheduler_plugins(cache_dir: Path | None = None) -> SchedulerPlugins:
    """The scheduler, built if missing or of another version (a few minutes the first time,
    as kube_build's binaries: the module's own vendor/ is incomplete, so its dependencies
    come from the module proxy), and the module's coscheduling manifests, copied beside it."""
    root = scheduler_plugins_dir(cache_dir)
    bin_dir = root / "bin"
    manifests = root / "manifests"
    bin_dir.mkdir(parents=True, exist_ok=True)
    built = SchedulerPlugins(
        scheduler=bin_dir / _BINARY,
        crd=manifests / _MANIFESTS[0],
        config_template=manifests / _MANIFESTS[1],
    )
    with (root / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        have_manifests = all((manifests / name).is_file() for name in _MANIFESTS)
        if _is_current(bin_dir, _BINARY, SCHEDULER_PLUGINS_VERSION) and have_manifests:
            return built
        module = _download_module()
        manifests.mkdir(exist_ok=True)
        for name in _MANIFESTS:
            shutil.copyfile(module / "manifests" / "coscheduling" / name, manifests / name)
        _build(module, root / "src", bin_dir)
    return built


def _download_module() -> Path:
    output = _go(
        ["mod", "download", "-json", f"{SCHEDULER_PLUGINS_MODULE}@{SCHEDULER_PLUGINS_VERSION}"],
        None,
        f"{SCHEDULER_PLUGINS_MODULE}: download",
    )
    info = json.loads(output)
    if "Error" in info:
        raise SandboxError(f"go mod download {SCHEDULER_PLUGINS_MODULE}: {info['Error']}")
    return Path(info["Dir"])


def _build(module: Path, src: Path, bin_dir: Path) -> None:
    """`go install` refuses a module with replace directives, and its vendor/ lacks modules:
    build a writable copy of it as the main module, vendor/ left out."""
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(module, src, ignore=shutil.ignore_patterns("vendor"))
    for path in [src, *src.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    with tempfile.TemporaryDirectory(dir=bin_dir) as out:
        target = Path(out) / _BINARY
        _go(
            ["build", "-mod=mod", *_build_flags(), "-o", str(target), "./cmd/scheduler"],
            src,
            f"scheduler-plugins {SCHEDULER_PLUGINS_VERSION}: compiling",
        )
        _install(target, bin_dir, SCHEDULER_PLUGINS_VERSION)
    shutil.rmtree(src, ignore_errors=True)  # the Go caches keep what a rebuild needs


def scheduler_config(plugins: SchedulerPlugins, kubeconfig: Path) -> dict[str, Any]:
    """The module's Coscheduling configuration, for this cluster: its kubeconfig, and the
    profile renamed so that it schedules only the pods that ask for it."""
    config: dict[str, Any] = yaml.safe_load(plugins.config_template.read_text())
    config["clientConnection"] = {
        **config.get("clientConnection", {}),
        "kubeconfig": str(kubeconfig),
    }
    config["leaderElection"] = {"leaderElect": False}
    for profile in config.get("profiles", []):
        profile["schedulerName"] = SCHEDULER_NAME
        for plugin in profile.get("pluginConfig", []):
            if plugin.get("name") == "Coscheduling":
                plugin.setdefault("args", {})
                plugin["args"]["permitWaitingTimeSeconds"] = PERMIT_WAITING_TIME_SECONDS
    return config


RETRY_UNSCHEDULABLE = "20s"
"""How long a pod Coscheduling refused waits before it is tried again. Coscheduling requeues
refused pods only on a new pod or a PodGroup change, and the sandbox runs no PodGroup
controller (whose status updates are those changes): without this a gang waiting for room
that another gang has just freed would wait kube-scheduler's 5 minutes."""


def scheduler_args(plugins: SchedulerPlugins, config: Path) -> list[str]:
    return [
        str(plugins.scheduler),
        f"--config={config}",
        "--secure-port=0",
        f"--pod-max-in-unschedulable-pods-duration={RETRY_UNSCHEDULABLE}",
        "--v=2",
    ]


def scheduler_rbac(user: str) -> list[tuple[str, dict[str, Any]]]:
    """What the scheduler needs beyond kube-scheduler's own role: PodGroups (read, and their
    status); (collection path, object) pairs."""
    api = POD_GROUP_APIS["scheduler-plugins"]
    name = "sandbox-scheduler-plugins"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": [api.group],
                "resources": [api.plural, f"{api.plural}/status"],
                "verbs": ["get", "list", "watch", "update", "patch"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    path = "/apis/rbac.authorization.k8s.io/v1"
    return [(f"{path}/clusterroles", role), (f"{path}/clusterrolebindings", binding)]
