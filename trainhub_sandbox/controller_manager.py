"""kube-controller-manager on a sandbox member cluster, running only the garbage collector: the
objects whose ownerReferences name an owner that is gone (a job's CR deleted) are deleted, as
on a real cluster. Built from the same Kubernetes release as the apiserver (kube_build.py)."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

PROCESS_NAME = "kube-controller-manager"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
CONTROLLERS = ("garbagecollector",)
"""Nothing else: the other controllers would act on the sandbox's objects (node lifecycle on
KWOK's nodes, service account tokens) and cost CPU for nothing the tests ask of them."""


def controller_manager_args(binary: Path, kubeconfig: Path, port: int) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        # The sandbox's apiserver has no client CA to publish in kube-system: without this
        # the lookup of extension-apiserver-authentication fails, and is retried, for ever.
        "--authentication-skip-lookup=true",
        f"--controllers={','.join(CONTROLLERS)}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--profiling=false",
    ]


def controller_manager_ready(port: int) -> bool:
    """Its /healthz answers ok (a path served without authentication, self-signed TLS)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}/healthz", timeout=2, context=context
        ) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False
