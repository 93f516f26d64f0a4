"""The Kubeflow Training Operator v1 beside a member cluster's control plane: built once from
its Go module into the sandbox cache, its CRDs and ClusterRole read from the module's
manifests (in the Go module cache, never copied into the repository), run as one process per
member cluster under an identity of its own.

Outside a pod the operator's webhook server needs what the kubelet would mount: the serving
certificate its cert rotator writes into the Secret `training-operator-webhook-cert`. Its
controllers start only once that pair is on disk (`certs_ready`); no webhook configuration
is installed, so the apiserver never calls the webhook (jobs are validated by trainhub).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import tempfile
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainhub_sandbox.cache import default_cache_dir
from trainhub_sandbox.errors import SandboxError
from trainhub_sandbox.kube_api import ApiClient
from trainhub_sandbox.kube_build import _build_flags, _go, _install, _is_current

TRAINING_OPERATOR_MODULE = "github.com/kubeflow/training-operator"
TRAINING_OPERATOR_VERSION = "v1.9.0"
_PACKAGE = f"{TRAINING_OPERATOR_MODULE}/cmd/training-operator.v1"
_BINARY = "training-operator"
PROCESS_NAME = "training-operator"

NAMESPACE = "kubeflow"
"""The operator's own namespace (its cert rotator keeps the Secret there)."""
WEBHOOK_SECRET = "training-operator-webhook-cert"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
"""Where the operator's cert rotator waits for the serving pair (a constant of the v1.9
binary, pkg/cert), which is also where its webhook server reads it: one folder on the
machine, whatever the number of operators. The pair only needs to be a valid one for the
webhook server to start; the apiserver never calls it here."""
OPERATOR_USER = "training-operator"
"""The operator's identity in the sandbox's token file, bound to the module's ClusterRole."""

_CRD_FOLDER = ("manifests", "base", "crds")
_ROLE_FILE = ("manifests", "base", "rbac", "role.yaml")
_KEY, _CERT = "tls.key", "tls.crt"


@dataclass(frozen=True)
class TrainingOperator:
    """The built operator and the module it was built from (manifests read from there)."""

    binary: Path
    module: Path

    def crd_manifests(self) -> list[dict[str, Any]]:
        folder = self.module.joinpath(*_CRD_FOLDER)
        return [
            document
            for path in sorted(folder.glob("kubeflow.org_*.yaml"))
            for document in yaml.safe_load_all(path.read_text())
            if document
        ]

    def cluster_role(self) -> dict[str, Any]:
        role: dict[str, Any] = yaml.safe_load(self.module.joinpath(*_ROLE_FILE).read_text())
        return role


def training_operator_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / f"training-operator-{TRAINING_OPERATOR_VERSION}"


def build_training_operator(cache_dir: Path | None = None) -> TrainingOperator:
    """The operator binary, built if missing or of another version (`go install` of the
    module's command: a few minutes on two cores the first time, then only the version stamp
    is checked), and the module's folder in the Go module cache."""
    root = training_operator_dir(cache_dir)
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        module = _download_module()
        if not _is_current(bin_dir, _BINARY, TRAINING_OPERATOR_VERSION):
            with tempfile.TemporaryDirectory(dir=bin_dir) as out:
                _go(
                    ["install", *_build_flags(), f"{_PACKAGE}@{TRAINING_OPERATOR_VERSION}"],
                    root,
                    f"training-operator {TRAINING_OPERATOR_VERSION}: compiling",
                    extra_env={"GOBIN": out},
                )
                built = Path(out) / "training-operator.v1"
                built = built.rename(Path(out) / _BINARY)
                _install(built, bin_dir, TRAINING_OPERATOR_VERSION)
    return TrainingOperator(binary=bin_dir / _BINARY, module=module)


def _download_module() -> Path:
    """The module's folder in the Go module cache (downloaded on first use)."""
    spec = f"{TRAINING_OPERATOR_MODULE}@{TRAINING_OPERATOR_VERSION}"
    info = json.loads(_go(["mod", "download", "-json", spec], None, f"{spec}: download"))
    if "Error" in info:
        raise SandboxError(f"go mod download {spec}: {info['Error']}")
    return Path(info["Dir"])


def operator_objects(operator: TrainingOperator) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) pairs the operator needs before it starts: its namespace, the
    empty Secret its cert rotator fills, and the module's ClusterRole bound to its user."""
    role = operator.cluster_role()
    name = str(role["metadata"]["name"])
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}
        ],
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
    }
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    return [
        (
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        ),
        (f"/api/v1/namespaces/{NAMESPACE}/secrets", secret),
        (f"{rbac}/clusterroles", role),
        (f"{rbac}/clusterrolebindings", binding),
    ]


@dataclass(frozen=True)
class OperatorPorts:
    metrics: int
    health: int
    webhook: int


def operator_args(operator: TrainingOperator, kubeconfig: Path, ports: OperatorPorts) -> list[str]:
    return [
        str(operator.binary),
        f"--kubeconfig={kubeconfig}",
        f"--metrics-bind-address=127.0.0.1:{ports.metrics}",
        f"--health-probe-bind-address=127.0.0.1:{ports.health}",
        f"--webhook-server-port={ports.webhook}",
        "--zap-log-level=info",
    ]


def install_certs(admin: ApiClient) -> bool:
    """Put the serving pair the cert rotator wrote into the Secret where the operator reads
    it, key first, each file renamed into place (a half-written pair would stop the
    manager); a pair already there (an earlier operator's) is kept. False while the Secret
    has no pair yet."""
    if (CERT_DIR / _KEY).is_file() and (CERT_DIR / _CERT).is_file():
        return True
    status, secret = admin.request(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{WEBHOOK_SECRET}"
    )
    data: Mapping[str, str] = (secret.get("data") or {}) if status == 200 else {}
    if not (data.get(_KEY) and data.get(_CERT)):
        return False
    CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in (_KEY, _CERT):
        handle, temporary = tempfile.mkstemp(dir=CERT_DIR, prefix=f".{name}.")
        with os.fdopen(handle, "wb") as out:
            out.write(base64.b64decode(data[name]))
        os.replace(temporary, CERT_DIR / name)
    return True


def operator_ready(ports: OperatorPorts) -> bool:
    """The manager's /readyz: 200 once the certificates are in place and the webhook server
    listens, i.e. once the controllers are being registered."""
    try:
        url = f"http://127.0.0.1:{ports.health}/readyz"
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
