"""A TrainJob's initializers rendered as upstream's JobSet builder renders them (kubeflow/
trainer v2.0.0, `pkg/runtime/framework/plugins/jobset/builder.go`) on upstream's own
torchtune runtime: `STORAGE_URI` upserted over the runtime's, the TrainJob's env merged,
`secretRef` as envFrom, one pod per initializer job, the runtime's `initializer` volume and
its /workspace mounts left as written; and a `pvc://` source's claim mounted read-only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from schemas.job_parsing import parse_job
from schemas.trainer_runtimes import parse_runtime, runtime_catalog
from workers.rendering import PodPlan, render_job

UPSTREAM_RUNTIME = Path(__file__).parents[2] / "schemas" / "runtimes" / "torchtune_llama3_2_1b.yaml"
CLAIM = "torchtune-llama3.2-1b"
SHARED = {"name": "initializer", "persistentVolumeClaim": {"claimName": CLAIM}}
AT_WORKSPACE = {"name": "initializer", "mountPath": "/workspace"}


def upstream_runtime() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(UPSTREAM_RUNTIME.read_text())
    return document


def trainjob(initializer: dict[str, Any], parallelism: int | None = None) -> dict[str, Any]:
    runtime = upstream_runtime()
    if parallelism is not None:  # the first replicated job's Job asks for more pods
        job_spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
        job_spec |= {"parallelism": parallelism, "completions": parallelism}
    runtime_catalog().add(parse_runtime(runtime))
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tune", "namespace": "team-a"},
        "spec": {
            "managedBy": "trainhub.io/dispatcher",
            "runtimeRef": {"name": "torchtune-llama3.2-1b"},
            "initializer": initializer,
            "trainer": {"resourcesPerNode": {"requests": {"cpu": "1"}}},
        },
    }


def container(pod: PodPlan, name: str) -> dict[str, Any]:
    found = next(c for c in pod.spec.containers if c.name == name)
    dumped: dict[str, Any] = found.model_dump(mode="json", exclude_none=True)
    return dumped


def volumes(pod: PodPlan) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (pod.spec.model_extra or {}).get("volumes", [])
    return found


def test_hugging_face_initializers_render_as_upstream() -> None:
    job = parse_job(
        trainjob(
            {
                "dataset": {
                    "storageUri": "hf://tatsu-lab/alpaca/data",
                    "env": [{"name": "ACCESS_TOKEN", "value": "hf_token"}],
                    "secretRef": {"name": "hf-credentials"},
                },
                "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct"},
            },
            # Upstream runs one pod of an initializer job whatever its Job template says (its
            # JobSet plugin sets parallelism and completions to 1; `replicas` other than 1 the
            # runtime webhook refuses, tests/schemas/test_trainjob.py).
            parallelism=3,
        )
    )
    dataset, model, node = render_job(job).pods
    assert [p.name for p in (dataset, model, node)] == [
        "tune-dataset-initializer-0-0",
        "tune-model-initializer-0-0",
        "tune-node-0-0",
    ]
    fetcher = container(dataset, "dataset-initializer")
    assert fetcher["image"] == "ghcr.io/kubeflow/trainer/dataset-initializer"
    assert "command" not in fetcher  # the image's own entrypoint
    # The runtime's STORAGE_URI replaced where it stood, the TrainJob's env after it (the
    # Indexed Job's JOB_COMPLETION_INDEX first).
    assert fetcher["env"] == [
        {"name": "JOB_COMPLETION_INDEX", "value": "0"},
        {"name": "STORAGE_URI", "value": "hf://tatsu-lab/alpaca/data"},
        {"name": "ACCESS_TOKEN", "value": "hf_token"},
    ]
    assert fetcher["envFrom"] == [{"secretRef": {"name": "hf-credentials"}}]
    assert fetcher["volumeMounts"] == [AT_WORKSPACE]
    assert volumes(dataset) == [SHARED]
    loader = container(model, "model-initializer")
    assert loader["image"] == "ghcr.io/kubeflow/trainer/model-initializer"
    assert {e["name"]: e["value"] for e in loader["env"]}["STORAGE_URI"] == (
        "hf://meta-llama/Llama-3.2-1B-Instruct"
    )
    assert loader["volumeMounts"] == [{"mountPath": "/workspace", "name": "initializer"}]
    assert volumes(model) == [SHARED]
    trainer = container(node, "node")
    assert trainer["volumeMounts"] == [AT_WORKSPACE]
    assert "dataset.data_dir=/workspace/dataset/data" in trainer["command"]
    assert volumes(node) == [SHARED]
    assert job.replicas_of("dataset-initializer") == 1


def test_a_pvc_source_is_mounted_read_only_in_its_initializer() -> None:
    job = parse_job(
        trainjob(
            {
                "dataset": {"storageUri": "https://data.internal/alpaca.parquet"},
                "model": {"storageUri": "pvc://models/llama/3.2-1b"},
            }
        )
    )
    dataset, model, node = render_job(job).pods
    assert volumes(dataset) == [SHARED]  # an http(s) source needs no volume
    manifest = model.manifest()["spec"]
    assert manifest["volumes"] == [
        SHARED,
        {"name": "pvc-source", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
    ]
    (loader,) = manifest["containers"]
    assert loader["volumeMounts"] == [
        {"mountPath": "/workspace", "name": "initializer"},
        {"name": "pvc-source", "mountPath": "/mnt/pvc", "readOnly": True},
    ]
    assert volumes(node) == [SHARED]
