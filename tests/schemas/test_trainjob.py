"""TrainJob and (Cluster)TrainingRuntime as upstream Kubeflow Trainer v2.0.0 defines them."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas.errors import JobInvalid
from schemas.job_parsing import parse_job
from schemas.trainer_runtimes import (
    parse_runtime,
    reset_runtime_catalog,
    runtime_catalog,
    shipped_runtimes,
    use_runtime_dirs,
)
from schemas.trainjob import TrainJob

RUNTIMES = Path(__file__).parent.parent / "data" / "trainer"


def trainjob(**spec: Any) -> dict[str, Any]:
    """Upstream's README example (a TrainJob on torch-distributed), with `spec` added."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "pytorch-simple", "namespace": "default"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 2,
                "image": "docker.io/kubeflow/pytorch-mnist:v1-9e12c68",
                "command": ["python", "/opt/pytorch-mnist/mnist.py", "--epochs", "1"],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}},
            },
            **spec,
        },
    }


@pytest.fixture(autouse=True)
def fresh_catalog() -> Iterator[None]:
    reset_runtime_catalog()
    yield
    reset_runtime_catalog()


def test_upstream_example_is_accepted_unchanged_with_upstreams_defaults() -> None:
    document = trainjob()
    job = parse_job(copy.deepcopy(document))
    assert isinstance(job, TrainJob)
    stored = job.to_document()
    # Quantities come back as the apiserver writes them: strings.
    assert stored["spec"]["trainer"] == {
        **document["spec"]["trainer"],
        "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}},
    }
    # The CRD's defaults, as the apiserver writes them.
    assert stored["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    assert stored["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"
    assert stored["spec"]["suspend"] is False
    assert job.total_replicas == 2 and not job.run_policy.managed_by_trainhub
    assert parse_job(stored).to_document() == stored


SHIPPED = (
    "mpi-distributed",
    "plain-distributed",
    "torch-distributed",
    "torchtune-llama3.2-1b",
    "torchtune-llama3.2-3b",
)
"""Upstream v2.0.0's torch, MPI and torchtune Llama 3.2 runtimes, and trainhub's plain one."""
TORCHTUNE = {"command": ["tune", "run"], "numProcPerNode": "auto"}
"""A torchtune trainer that sets numProcPerNode: upstream's webhook checks only such."""


def test_shipped_runtimes_are_upstreams_and_a_plain_one() -> None:
    names = [r.metadata.name for r in shipped_runtimes()]
    assert names == list(SHIPPED)
    assert all(r.kind == "ClusterTrainingRuntime" for r in shipped_runtimes())


def test_unknown_runtime_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(JobInvalid) as raised:
        parse_job(trainjob(runtimeRef={"name": "deepspeed-distributed"}))
    message = str(raised.value)
    assert "'deepspeed-distributed'" in message
    assert f"known runtimes: {', '.join(SHIPPED)} (got" in message


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"managedBy": "kubeflow.org/training-operator"}, "ManagedBy must be"),
        ({"suspend": "yes"}, "spec.suspend"),
        ({"trainer": {"numProcPerNode": "many"}}, "must have an int value or"),
        (
            {"trainer": {"env": [{"name": "PET_NNODES", "value": "9"}]}},
            "must not have reserved envs, invalid envs configured: ['PET_NNODES']",
        ),
        (
            {"initializer": {"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}}},
            "must have dataset-initializer job",
        ),
        (
            {"podSpecOverrides": [{"targetJobs": [{"name": "launcher"}]}]},
            "must not have targetJob that doesn't exist",
        ),
        (
            {
                "podSpecOverrides": [
                    {
                        "targetJobs": [{"name": "node"}],
                        "containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}],
                    }
                ]
            },
            "must not have envs for the dataset-initializer, model-initializer, node",
        ),
        ({"unknownField": 1}, "unknownField"),
        # Upstream's Torch plugin on torchtune (v2.0.0's model list has no llama3_2/3B).
        (
            {"runtimeRef": {"name": "torchtune-llama3.2-3b"}, "trainer": TORCHTUNE},
            "spec.runtimeRef.name: must have a supported pretrained model, invalid model "
            "configured: llama3_2/3B (got 'torchtune-llama3.2-3b')",
        ),
        (
            {
                "runtimeRef": {"name": "torchtune-llama3.2-1b"},
                "trainer": TORCHTUNE | {"numNodes": 2},
            },
            "spec.trainer.numNodes: must be 1 for llama3_2/1B model (got 2)",
        ),
    ],
)
def test_upstreams_validation(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(JobInvalid) as raised:
        parse_job(trainjob(**spec))
    assert says in str(raised.value)


def test_torchtune_trainjobs_without_numprocpernode_are_not_checked_as_upstream() -> None:
    # The SDK's BuiltinTrainer sets no numProcPerNode: the Torch plugin's Validate returns
    # before its torchtune rules, so the 3B runtime takes it.
    trainer = {"command": ["tune", "run"], "args": ["epochs=1"]}
    job = parse_job(trainjob(runtimeRef={"name": "torchtune-llama3.2-3b"}, trainer=trainer))
    assert isinstance(job, TrainJob)
    launch = job.resolved.torchtune
    assert launch is not None
    assert (launch.recipe, launch.config) == ("full_finetune_distributed", "llama3_2/3B_full")


def test_mpi_takes_an_integer_number_of_processes() -> None:
    with pytest.raises(JobInvalid, match="must have an int value for MPI TrainJob"):
        parse_job(
            trainjob(runtimeRef={"name": "mpi-distributed"}, trainer={"numProcPerNode": "auto"})
        )


def runtime(ml_policy: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "custom"},
        "spec": {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": []}}},
    }


@pytest.mark.parametrize(
    ("ml_policy", "says"),
    [
        ({"torch": {}, "mpi": {}}, "Only one of the policy can be configured"),
        (
            {"numNodes": 2, "torch": {"elasticPolicy": {"minNodes": 1, "maxNodes": 3}}},
            "numNodes should not be set if torch.elasticPolicy is configured",
        ),
        ({"torch": {"numProcPerNode": 0}}, "NumProcPerNode must be equal to auto, cpu, gpu"),
        ({"torch": {"numProcPerNode": "tpu"}}, "NumProcPerNode must be equal to auto, cpu, gpu"),
        ({"mpi": {"mpiImplementation": "Intel"}}, "mpiImplementation"),
    ],
)
def test_runtime_cel_rules(ml_policy: dict[str, Any], says: str) -> None:
    with pytest.raises(JobInvalid) as raised:
        parse_runtime(runtime(ml_policy))
    assert says in str(raised.value)


def _replicated_job(name: str, replicas: int | None, step: str | None) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": name,
        "template": {
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}}
        },
    }
    if replicas is not None:
        job["replicas"] = replicas
    if step is not None:
        job["template"]["metadata"] = {
            "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}
        }
    return job


@pytest.mark.parametrize(
    ("name", "replicas", "step", "refused"),
    [
        ("launcher", 2, None, True),  # the launcher, labelled or not
        ("node", 2, "trainer", True),  # a step a TrainJob's ancestors name
        ("prep", 3, "dataset-initializer", True),
        ("prep", 0, "model-initializer", True),
        ("launcher", 1, None, False),
        ("launcher", None, "trainer", False),  # absent: JobSet's default, 1
        ("node", 4, None, False),  # unlabelled: not the webhook's concern
        ("node", 2, "evaluator", False),  # not one of its ancestor steps
    ],
)
def test_runtime_webhook_one_replica_for_launcher_and_ancestor_steps(
    name: str, replicas: int | None, step: str | None, refused: bool
) -> None:
    """Kubeflow Trainer v2.0.0's (Cluster)TrainingRuntime webhooks: "always must be 1"."""
    document = runtime({"torch": {}})
    document["spec"]["template"]["spec"]["replicatedJobs"] = [_replicated_job(name, replicas, step)]
    if not refused:
        parse_runtime(document)
        return
    with pytest.raises(JobInvalid) as raised:
        parse_runtime(document, "team.yaml")
    assert str(raised.value) == (
        "team.yaml: ClusterTrainingRuntime: spec.template.spec.replicatedJobs.0: replicas: "
        f"always must be 1 (got {replicas})"
    )


def test_operators_runtimes_from_a_directory_namespaced_by_namespace() -> None:
    use_runtime_dirs([RUNTIMES])
    assert "TrainingRuntime team-a/torch-with-assets" in runtime_catalog().names()
    ref = {"name": "torch-with-assets", "kind": "TrainingRuntime"}
    document = trainjob(runtimeRef=ref, trainer={"numNodes": 1})
    with pytest.raises(JobInvalid, match="not known"):
        parse_job(document)  # a TrainingRuntime serves its own namespace only
    document["metadata"]["namespace"] = "team-a"
    job = parse_job(document)
    assert isinstance(job, TrainJob)
    assert list(job.replica_specs) == ["dataset-initializer", "model-initializer", "node"]


def test_run_policy_is_made_once_and_follows_suspend_and_manager() -> None:
    job = parse_job(trainjob())
    assert isinstance(job, TrainJob)
    first = job.run_policy
    assert first.suspend is False and job.run_policy is first  # made once, not per read
    job.spec.suspend = True
    assert job.run_policy.suspend is True and job.run_policy is not first
    job.spec.managedBy = "kueue.x-k8s.io/multikueue"
    assert job.run_policy.managedBy == "kueue.x-k8s.io/multikueue"
    assert job.run_policy.backoffLimit == first.backoffLimit
