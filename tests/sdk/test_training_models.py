"""`TrainingClient`'s job models and signatures: upstream 1.9's (kubeflow-training's
`training_client.py` and models at v1.9.0), checked against a table of them."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from typing import Any

import pytest

from trainhub.sdk_view import TrainHubJob
from trainhub.training_client import (
    KubeflowOrgV1JobCondition,
    KubeflowOrgV1PyTorchJob,
    KubeflowOrgV1ReplicaSpec,
    TrainingClient,
    V1Container,
    V1EnvVar,
    V1ObjectMeta,
)
from trainhub.training_documents import from_document, to_document
from trainhub.training_jobs import job_object, merge_patch

_T = 120  # upstream's DEFAULT_TIMEOUT
_N: Any = None
UPSTREAM: dict[str, list[tuple[str, Any]]] = {
    "create_job": [
        ("job", _N),
        ("name", _N),
        ("namespace", _N),
        ("job_kind", _N),
        ("base_image", _N),
        ("train_func", _N),
        ("parameters", _N),
        ("num_workers", 1),
        ("num_procs_per_worker", _N),
        ("resources_per_worker", _N),
        ("num_chief_replicas", _N),
        ("num_ps_replicas", _N),
        ("packages_to_install", _N),
        ("pip_index_url", "https://pypi.org/simple"),
        ("env_vars", _N),
    ],
    "get_job": [
        ("name", inspect.Parameter.empty),
        ("namespace", _N),
        ("job_kind", _N),
        ("timeout", _T),
    ],
    "list_jobs": [("namespace", _N), ("job_kind", _N), ("timeout", _T)],
    "wait_for_job_conditions": [
        ("name", inspect.Parameter.empty),
        ("namespace", _N),
        ("job_kind", _N),
        ("expected_conditions", frozenset({"Succeeded"})),
        ("wait_timeout", 600),
        ("polling_interval", 15),
        ("callback", _N),
        ("timeout", _T),
    ],
    "get_job_logs": [
        ("name", inspect.Parameter.empty),
        ("namespace", _N),
        ("job_kind", _N),
        ("is_master", True),
        ("replica_type", _N),
        ("replica_index", _N),
        ("follow", False),
        ("timeout", _T),
        ("verbose", False),
    ],
    "update_job": [
        ("job", inspect.Parameter.empty),
        ("name", inspect.Parameter.empty),
        ("namespace", _N),
        ("job_kind", _N),
    ],
    "delete_job": [
        ("name", inspect.Parameter.empty),
        ("namespace", _N),
        ("job_kind", _N),
        ("delete_options", _N),
    ],
}
for _getter in (
    "get_job_conditions",
    *(f"is_job_{s}" for s in ("created", "running", "restarting", "succeeded", "failed")),
):
    UPSTREAM[_getter] = [
        ("name", _N),
        ("namespace", _N),
        ("job_kind", _N),
        ("job", _N),
        ("timeout", _T),
    ]
for _pods in ("get_job_pods", "get_job_pod_names"):
    UPSTREAM[_pods] = [
        ("name", inspect.Parameter.empty),
        ("namespace", _N),
        ("is_master", False),
        ("replica_type", _N),
        ("replica_index", _N),
        ("timeout", _T),
    ]


@pytest.mark.parametrize("method", sorted(UPSTREAM))
def test_positional_order_names_and_defaults_are_upstreams(method: str) -> None:
    parameters = list(inspect.signature(getattr(TrainingClient, method)).parameters.values())
    positional = [(p.name, p.default) for p in parameters[1:] if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == UPSTREAM[method]


DOCUMENT: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {
        "name": "mnist",
        "labels": {"app.kubernetes.io/name": "mnist"},
        "creationTimestamp": "2024-01-05T22:58:20Z",
    },
    "spec": {
        "pytorchReplicaSpecs": {
            "Master": {
                "replicas": 1,
                "template": {
                    "spec": {
                        "hostIPC": True,
                        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                        "containers": [
                            {
                                "name": "pytorch",
                                "image": "example/torch:1",
                                "env": [{"name": "A", "value": "1"}],
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ],
                    }
                },
            }
        },
        "runPolicy": {"cleanPodPolicy": "None", "schedulingPolicy": {"queue": "research"}},
    },
}


def test_a_document_reads_as_upstreams_models_and_writes_back_the_same() -> None:
    job = from_document(DOCUMENT)
    assert isinstance(job, KubeflowOrgV1PyTorchJob)
    assert job.metadata.creation_timestamp == datetime(2024, 1, 5, 22, 58, 20, tzinfo=UTC)
    master = job.spec.pytorch_replica_specs["Master"]
    assert isinstance(master, KubeflowOrgV1ReplicaSpec)
    pod = master.template.spec
    assert pod.host_ipc is True
    assert pod.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert isinstance(pod.containers[0], V1Container)
    assert pod.containers[0].env == [V1EnvVar(name="A", value="1")]
    assert job.spec.run_policy.scheduling_policy.queue == "research"
    assert job.status is None and job.spec.elastic_policy is None
    assert job.to_dict()["spec"]["run_policy"]["clean_pod_policy"] == "None"
    assert to_document(job) == DOCUMENT
    with pytest.raises(AttributeError):
        _ = job.spec.no_such_field


def test_models_are_built_as_upstreams_are() -> None:
    meta = V1ObjectMeta(name="x", namespace="team")
    assert meta == V1ObjectMeta(namespace="team", name="x") and meta.labels is None
    assert V1EnvVar("A", "1").to_dict() == {"name": "A", "value": "1", "value_from": None}
    with pytest.raises(TypeError, match="unexpected keyword argument 'nmae'"):
        V1EnvVar(nmae="A")
    container = V1Container(name="c", image="i", image_pull_policy="Always", tty=True)
    assert to_document(container) == {
        "name": "c",
        "image": "i",
        "imagePullPolicy": "Always",
        "tty": True,
    }

    class KubernetesModel:  # as kubernetes.client's models are
        openapi_types = {"name": "str", "mount_path": "str"}
        attribute_map = {"name": "name", "mount_path": "mountPath"}

        def __init__(self) -> None:
            self.name, self.mount_path = "data", "/data"

    assert to_document([KubernetesModel()]) == [{"name": "data", "mountPath": "/data"}]


def test_a_rejected_job_reads_as_failed_and_patches_merge() -> None:
    from schemas.status import JobPhase

    rejected = TrainHubJob(
        uid="u",
        name="big",
        namespace="default",
        kind="PyTorchJob",
        phase=JobPhase.REJECTED,
        reason="Unschedulable",
        message="can never fit",
        spec=DOCUMENT,
    )
    job = job_object(rejected, "PyTorchJob")
    assert job.metadata.uid == "u"
    failed = [c for c in job.status.conditions if c.type == "Failed"]
    assert failed == [
        KubeflowOrgV1JobCondition(
            type="Failed", status="True", reason="Unschedulable", message="can never fit"
        )
    ]
    patched = merge_patch(
        DOCUMENT, {"spec": {"runPolicy": {"suspend": True, "cleanPodPolicy": None}}}
    )
    assert patched["spec"]["runPolicy"] == {
        "suspend": True,
        "schedulingPolicy": {"queue": "research"},
    }
    assert patched["spec"]["pytorchReplicaSpecs"] == DOCUMENT["spec"]["pytorchReplicaSpecs"]
