"""`get_job_pods` / `get_job_pod_names`: the names the SDK gives are the pods the worker of
whichever cluster runs the job really made."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import jax_job
from trainhub import AsyncTrainHubClient, JobPodsUnknownError, TrainHubJob
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.sdk_pods import job_pods
from trainhub.settings import TrainhubSettings
from workers.cluster_spec import parse_cluster_spec


def pytorch_job(name: str, workers: int, gpu: int) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "example/torch:1",
            "command": ["python", "train.py"],
            "resources": {
                "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpu},
                "limits": {"nvidia.com/gpu": gpu},
            },
        }
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"annotations": {"trainhub.io/sim-duration": "30s"}},
                "spec": {"containers": [container]},
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }


async def test_pod_names_are_the_ones_the_running_worker_made() -> None:
    options = EmbeddedOptions(
        clusters=[
            parse_cluster_spec("cpus:cpu=8,memory=16Gi"),
            parse_cluster_spec("gpus:cpu=8,memory=32Gi,gpu=8"),
        ],
        backend="sim",
        heartbeat_interval=0.1,
    )
    async with Embedded(options) as system:
        async with AsyncTrainHubClient(settings=TrainhubSettings(), bus=system.bus) as client:
            torch_uid = await client.create_job(pytorch_job("llm", workers=2, gpu=1))
            jax_uid = await client.create_job(jax_job("tiny", workers=2, duration="30s"))
            for name, namespace in (("llm", "team-a"), ("tiny", "default")):
                await client.wait_for_job_conditions(
                    name, namespace, expected_conditions={"Running"}, timeout=30
                )

            pods = await client.get_job_pods("team-a/llm")
            assert [(p.name, p.replica_type, p.replica_index, p.is_master) for p in pods] == [
                ("llm-master-0", "Master", 0, True),
                ("llm-worker-0", "Worker", 0, False),
                ("llm-worker-1", "Worker", 1, False),
            ]
            assert {p.cluster for p in pods} == {"gpus"} and {p.namespace for p in pods} == {
                "team-a"
            }
            made = system.worker("gpus").runs[torch_uid].pods
            assert sorted(p.name for p in pods) == sorted(made)

            tiny = (await client.get_job("tiny")).cluster
            assert tiny is not None
            names = await client.get_job_pod_names("tiny")
            assert sorted(names) == sorted(system.worker(tiny).runs[jax_uid].pods)
            assert await client.get_job_pod_names("tiny", is_master=True) == ["tiny-worker-0"]
            assert await client.get_job_pod_names(
                "llm", "team-a", replica_type="worker", replica_index=1
            ) == ["llm-worker-1"]
            assert await client.get_job_pod_names("llm", "team-a", replica_type="chief") == []


def test_a_job_whose_document_is_gone_cannot_name_its_pods() -> None:
    with pytest.raises(JobPodsUnknownError, match="no longer holds the document"):
        job_pods(TrainHubJob(uid="u", name="lost", namespace="default"))
