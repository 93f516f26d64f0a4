"""The chart's objects as a real apiserver judges them: `helm template`, then each object
created with a server-side dry run (`dryRun=All`, `fieldValidation=Strict`: an unknown or
misplaced field is an error, not silently dropped) on a sandbox cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.helm_chart import CI_VALUES, render, require_helm
from trainhub_sandbox.kube_api import ApiClient
from trainhub_sandbox.kube_cluster import MemberCluster

pytestmark = pytest.mark.kube

_COLLECTIONS = {
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps",
    ("v1", "Secret"): "/api/v1/namespaces/{ns}/secrets",
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    ("v1", "ServiceAccount"): "/api/v1/namespaces/{ns}/serviceaccounts",
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments",
}
# The sandbox has no Prometheus Operator CRDs; `helm lint` covers the ServiceMonitor.
_NOT_SERVED = {("monitoring.coreos.com/v1", "ServiceMonitor")}


@pytest.fixture
def helm() -> Path:
    return require_helm()


async def test_the_rendered_chart_passes_a_server_side_dry_run(
    helm: Path, east: MemberCluster
) -> None:
    objects = render(helm, CI_VALUES, namespace="default")
    admin = ApiClient.for_cluster(east)
    answers: dict[str, tuple[int, dict[str, Any]]] = {}
    for manifest in objects:
        kind = (manifest["apiVersion"], manifest["kind"])
        if kind in _NOT_SERVED:
            continue
        path = _COLLECTIONS[kind].format(ns="default") + "?dryRun=All&fieldValidation=Strict"
        where = f"{manifest['kind']} {manifest['metadata']['name']}"
        answers[where] = await asyncio.to_thread(admin.request, "POST", path, manifest)
    refused = {w: (s, r.get("message")) for w, (s, r) in answers.items() if s not in (200, 201)}
    assert not refused, refused
    assert sum(w.startswith("Deployment ") for w in answers) == 4
    # A dry run stores nothing.
    status, _ = await asyncio.to_thread(
        admin.request, "GET", "/apis/apps/v1/namespaces/default/deployments/trainhub-hub"
    )
    assert status == 404
