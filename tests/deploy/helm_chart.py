"""The Helm chart in deploy/helm/trainhub, rendered by a real `helm`: the one on PATH, or one
built from its Go module into ~/.cache/trainhub/bin (see `install_helm`)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.queries import DEPLOY
from trainhub_sandbox.kube_build import KUBERNETES_VERSION

CHART = DEPLOY / "helm" / "trainhub"
CI_VALUES = CHART / "ci" / "two-clusters-values.yaml"
HELM_VERSION = "v3.22.0"
HELM_CACHE = Path.home() / ".cache" / "trainhub" / "bin"
_BUILD_TIMEOUT = 1800.0


def helm_binary() -> Path | None:
    on_path = shutil.which("helm")
    if on_path is not None:
        return Path(on_path)
    cached = HELM_CACHE / "helm"
    return cached if cached.is_file() else None


def install_helm() -> Path | None:
    """Build helm from its Go module into HELM_CACHE, once (about 6 CPU-minutes, a few more
    to download its modules the first time); None without `go`. Raises when the build fails."""
    if helm_binary() is not None:
        return helm_binary()
    if shutil.which("go") is None:
        return None
    HELM_CACHE.mkdir(parents=True, exist_ok=True)
    with (HELM_CACHE / ".helm.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building it right now
        if helm_binary() is None:
            subprocess.run(
                ["nice", "go", "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
                env={**os.environ, "GOBIN": str(HELM_CACHE)},
                capture_output=True,
                text=True,
                timeout=_BUILD_TIMEOUT,
                check=True,
            )
    return helm_binary()


def require_helm() -> Path:
    helm = helm_binary()
    if helm is None:
        pytest.skip(
            "no helm: put one on PATH, or let the test session build it (needs `go`): "
            f"GOBIN={HELM_CACHE} go install helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"
        )
    return helm


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """helm, rendering for the sandbox's Kubernetes version (a helm built with `go install`
    would otherwise assume v1.20, which the chart's kubeVersion refuses)."""
    command = [str(helm), *args]
    if args and args[0] in ("lint", "template"):
        command += ["--kube-version", KUBERNETES_VERSION]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def render(
    helm: Path, *values: Path, sets: tuple[str, ...] = (), namespace: str = "default"
) -> list[dict[str, Any]]:
    """`helm template` as a list of objects; fails the test with helm's message."""
    args = ["template", "trainhub", str(CHART), "--namespace", namespace]
    for path in values:
        args += ["--values", str(path)]
    for item in sets:
        args += ["--set", item]
    done = run_helm(helm, *args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]
