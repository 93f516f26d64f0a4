"""A TrainJob's initializers on a real apiserver (the sandbox's; kwok runs no containers, so
this is about the objects): upstream's torchtune runtime as shipped, its hf:// dataset and a
`pvc://` model, and the pods the `kube` backend creates carry upstream's images, STORAGE_URI,
the `initializer` claim at /workspace, and the model's claim read-only at /mnt/pvc."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.job_parsing import parse_job
from schemas.trainer_runtimes import parse_runtime, runtime_catalog
from tests.kube.sandbox_access import job_objects
from trainhub_sandbox.kube_cluster import MemberCluster
from workers.backends.kube import KubeBackend
from workers.rendering import render_job

pytestmark = pytest.mark.kube

UPSTREAM_RUNTIME = Path(__file__).parents[2] / "schemas" / "runtimes" / "torchtune_llama3_2_1b.yaml"
SHARED = {"name": "initializer", "persistentVolumeClaim": {"claimName": "torchtune-llama3.2-1b"}}


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in pod["spec"]["containers"] if c["name"] == name)
    return found


def _volumes(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in pod["spec"]["volumes"] if not v["name"].startswith("kube-api-access")]


def _mounts(container: dict[str, Any]) -> list[tuple[str, str, bool]]:
    return [
        (m["name"], m["mountPath"], bool(m.get("readOnly")))
        for m in container.get("volumeMounts", [])
        if not m["name"].startswith("kube-api-access")
    ]


async def test_initializer_pods_carry_upstreams_volumes_on_the_apiserver(
    east: MemberCluster, east_backend: KubeBackend
) -> None:
    runtime_catalog().add(parse_runtime(yaml.safe_load(UPSTREAM_RUNTIME.read_text())))
    job = parse_job(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "tune-assets", "namespace": "default"},
            "spec": {
                "managedBy": "trainhub.io/dispatcher",
                "runtimeRef": {"name": "torchtune-llama3.2-1b"},
                "initializer": {
                    "dataset": {
                        "storageUri": "hf://tatsu-lab/alpaca",
                        "secretRef": {"name": "hf-credentials"},
                    },
                    "model": {"storageUri": "pvc://models/llama/3.2-1b"},
                },
                "trainer": {"resourcesPerNode": {"requests": {"cpu": "500m"}}},
            },
        }
    )
    try:
        for pod in render_job(job).pods:
            await east_backend.create_pod(job.uid, pod)
        pods = {p["metadata"]["name"]: p for p in await job_objects(east, "pods", job.uid)}
        dataset = pods["tune-assets-dataset-initializer-0-0"]
        model = pods["tune-assets-model-initializer-0-0"]
        node = pods["tune-assets-node-0-0"]
        fetcher = _container(dataset, "dataset-initializer")
        assert fetcher["image"] == "ghcr.io/kubeflow/trainer/dataset-initializer"
        assert {"name": "STORAGE_URI", "value": "hf://tatsu-lab/alpaca"} in fetcher["env"]
        assert fetcher["envFrom"] == [{"secretRef": {"name": "hf-credentials"}}]
        assert _mounts(fetcher) == [("initializer", "/workspace", False)]
        assert _volumes(dataset) == [SHARED]
        loader = _container(model, "model-initializer")
        assert loader["image"] == "ghcr.io/kubeflow/trainer/model-initializer"
        assert {"name": "STORAGE_URI", "value": "pvc://models/llama/3.2-1b"} in loader["env"]
        assert _mounts(loader) == [
            ("initializer", "/workspace", False),
            ("pvc-source", "/mnt/pvc", True),
        ]
        assert _volumes(model) == [
            SHARED,
            {
                "name": "pvc-source",
                "persistentVolumeClaim": {"claimName": "models", "readOnly": True},
            },
        ]
        assert _mounts(_container(node, "node")) == [("initializer", "/workspace", False)]
        assert _volumes(node) == [SHARED]
    finally:
        await east_backend.delete_job(job.uid, "default")
