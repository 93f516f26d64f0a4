"""A TrainJob rendered with each runtime. Expected values are written from upstream's
documentation (kubeflow/trainer v2.0.0: the runtime plugins' docs and constants): torch sets
PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the Job completion index), PET_MASTER_ADDR
(node 0 of the node job) and PET_MASTER_PORT 29500 on the trainer's `node` container; MPI
writes `<host> slots=<numProcPerNode>` per node into `<job>-mpi-hostfile`, mounted at
/etc/mpi on the launcher, with the OpenMPI variables; a torchtune TrainJob (`command: [tune,
run]`) gets torch's variables but for the master's, its command the recipe and config the
node and process counts choose (the Torch plugin's torchtune part and its tests, v2.0.0)."""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas.job_parsing import parse_job
from schemas.trainer import RuntimeRef
from schemas.trainer_runtimes import (
    parse_runtime,
    reset_runtime_catalog,
    runtime_catalog,
    shipped_runtimes,
    use_runtime_dirs,
)
from schemas.trainjob import TrainJob
from schemas.trainjob_resolution import resolve
from workers import ssh_keys
from workers.backends.base import PodObservation
from workers.frameworks.base import ReplicaCounts
from workers.frameworks.trainjob import TrainJobAdapter
from workers.job_run import JobRun
from workers.network import LoopbackNetwork
from workers.rendering import LABEL_JOB_UID, PodPlan, render_job
from workers.ssh_keys import ecdsa_p521_key_pair

RUNTIMES = Path(__file__).parent.parent / "data" / "trainer"


@pytest.fixture(autouse=True)
def fresh_catalog() -> Iterator[None]:
    reset_runtime_catalog()
    yield
    reset_runtime_catalog()


def trainjob(runtime: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": namespace},
        "spec": {"runtimeRef": {"name": runtime}, "managedBy": "trainhub.io/dispatcher", **spec},
    }


def env(pod: PodPlan, container: str = "node") -> dict[str, str | None]:
    found = next(c for c in pod.spec.containers if c.name == container)
    return {e.name: e.value for e in found.env or []}


def test_torch_distributed() -> None:
    job = parse_job(
        trainjob(
            "torch-distributed",
            trainer={
                "numNodes": 3,
                "image": "example/torch:1",
                "command": ["torchrun", "train.py"],
                "env": [{"name": "EPOCHS", "value": "2"}],
                "resourcesPerNode": {"limits": {"cpu": "4", "memory": "2Gi"}},
            },
        )
    )
    rendered = render_job(job)
    assert [p.name for p in rendered.pods] == ["tj-node-0-0", "tj-node-0-1", "tj-node-0-2"]
    for rank, pod in enumerate(rendered.pods):
        assert env(pod) == {
            "JOB_COMPLETION_INDEX": str(rank),
            "PET_NNODES": "3",
            # `auto` on CPUs only: the CPU limit, as upstream's Torch plugin counts it.
            "PET_NPROC_PER_NODE": "4",
            "PET_NODE_RANK": str(rank),
            # Upstream's Torch plugin (v2.0.0): `<trainjob>-node-0-0.<trainjob>`, node 0's
            # hostname under the JobSet's subdomain.
            "PET_MASTER_ADDR": "tj-node-0-0.tj",
            "PET_MASTER_PORT": "29500",
            "EPOCHS": "2",
        }
        extra = pod.spec.model_extra or {}
        assert (extra["hostname"], extra["subdomain"]) == (f"tj-node-0-{rank}", "tj")
        node = pod.spec.containers[0]
        assert node.image == "example/torch:1" and node.command == ["torchrun", "train.py"]
        assert pod.requests == {"cpu": 4, "memory": 2 * 1024**3}
    assert rendered.pods[0].labels["training.kubeflow.org/job-role"] == "master"
    assert [s.name for s in rendered.services] == [p.name for p in rendered.pods]
    # JobSet's headless Service, named after the JobSet (the TrainJob), selecting every pod and
    # publishing them before they are ready, makes `<pod>.<trainjob>` resolve.
    (subdomain,) = rendered.job_services
    manifest = subdomain.manifest()
    assert manifest["metadata"]["name"] == "tj"
    assert manifest["spec"]["clusterIP"] == "None"
    assert manifest["spec"]["publishNotReadyAddresses"] is True
    assert manifest["spec"]["ports"] == []
    for pod in rendered.pods:
        assert all(pod.labels[k] == v for k, v in manifest["spec"]["selector"].items())
    assert manifest in rendered.manifests()


def test_torch_master_address_reaches_node_0_on_local() -> None:
    job = parse_job(trainjob("torch-distributed", trainer={"numNodes": 2}))
    net = LoopbackNetwork()
    first, second = render_job(job, net).pods
    port = net.port("tj-node-0-0", 29500)
    for pod in (first, second):
        assert env(pod)["PET_MASTER_ADDR"] == "127.0.0.1"
        assert env(pod)["PET_MASTER_PORT"] == str(port)


def test_torch_numprocpernode_as_given_with_gpus() -> None:
    job = parse_job(
        trainjob(
            "torch-distributed",
            trainer={
                "numProcPerNode": "gpu",
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}},
            },
        )
    )
    (pod,) = render_job(job).pods
    assert env(pod)["PET_NPROC_PER_NODE"] == "gpu" and env(pod)["PET_NNODES"] == "1"


def test_mpi_distributed() -> None:
    job = parse_job(trainjob("mpi-distributed", trainer={"numNodes": 3, "numProcPerNode": 2}))
    rendered = render_job(job)
    # runLauncherAsNode: the launcher is one of the 3 nodes.
    assert [p.name for p in rendered.pods] == ["tj-launcher-0-0", "tj-node-0-0", "tj-node-0-1"]
    (hostfile,) = rendered.config_maps
    assert hostfile.name == "tj-mpi-hostfile"
    assert hostfile.data == {
        "hostfile": "tj-launcher-0-0 slots=2\ntj-node-0-0 slots=2\ntj-node-0-1 slots=2\n"
    }
    launcher = rendered.pods[0]
    assert env(launcher) == {
        "JOB_COMPLETION_INDEX": "0",
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_set_default_slots": "2",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
    }
    mounts = (launcher.spec.containers[0].model_extra or {})["volumeMounts"]
    assert {"name": "mpi-hostfile", "mountPath": "/etc/mpi"} in mounts
    assert launcher.labels["training.kubeflow.org/job-role"] == "master"
    assert "OMPI_MCA_orte_default_hostfile" not in env(rendered.pods[1])
    # The runtime's successPolicy: the launcher's completion completes the TrainJob.
    adapter = TrainJobAdapter()
    done = {"launcher": ReplicaCounts(expected=1, succeeded=1), "node": ReplicaCounts(expected=2)}
    assert adapter.succeeded(job, done)


def test_plain_distributed() -> None:
    job = parse_job(trainjob("plain-distributed", trainer={"numNodes": 2, "command": ["python"]}))
    rendered = render_job(job)
    assert [env(p) for p in rendered.pods] == [
        {"JOB_COMPLETION_INDEX": "0"},
        {"JOB_COMPLETION_INDEX": "1"},
    ]
    adapter = TrainJobAdapter()
    assert not adapter.succeeded(job, {"node": ReplicaCounts(expected=2, succeeded=1)})
    assert adapter.succeeded(job, {"node": ReplicaCounts(expected=2, succeeded=2)})


TORCHTUNE_ARGS = [
    "dtype=bf16",
    "batch_size=32",
    "epochs=10",
    "loss=torchtune.modules.loss.CEWithChunkedOutputLoss",
]
RUNTIME_PATHS = [
    "output_dir=/workspace/output",
    "tokenizer.path=/workspace/model/original/tokenizer.model",
    "checkpointer.checkpoint_dir=/workspace/model",
]
"""The torchtune runtimes' immutable items, kept from their command."""
GPU = {"nvidia.com/gpu": 1}


@pytest.mark.parametrize("size", ["1B", "3B"])
def test_torchtune_llama3_2_fine_tunes_on_its_devices_after_the_initializers(size: str) -> None:
    runtime = f"torchtune-llama3.2-{size.lower()}"
    job = parse_job(
        trainjob(
            runtime,
            initializer={"dataset": {"storageUri": "hf://tatsu-lab/alpaca/data"}},
            trainer={
                "command": ["tune", "run"],
                "args": TORCHTUNE_ARGS,
                # As the SDK writes it: requests and limits (upstream's plugin counts one
                # process where the requests are missing).
                "resourcesPerNode": {"requests": GPU, "limits": GPU},
            },
        )
    )
    rendered = render_job(job)
    assert [p.name for p in rendered.pods] == [
        "tj-dataset-initializer-0-0",
        "tj-model-initializer-0-0",
        "tj-node-0-0",
    ]
    dataset, model, node = rendered.pods
    assert env(dataset, "dataset-initializer")["STORAGE_URI"] == "hf://tatsu-lab/alpaca/data"
    model_uri = f"hf://meta-llama/Llama-3.2-{size}-Instruct"  # the runtime's own
    assert env(model, "model-initializer")["STORAGE_URI"] == model_uri
    adapter = TrainJobAdapter()
    assert adapter.depends_on(job, "model-initializer") == (("dataset-initializer", "Complete"),)
    assert adapter.depends_on(job, "node") == (("model-initializer", "Complete"),)
    # `auto` with a GPU: the processes are torchrun's to count; no master for torchtune.
    assert env(node) == {
        "JOB_COMPLETION_INDEX": "0",
        "PET_NNODES": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_NODE_RANK": "0",
    }
    container = node.spec.containers[0]
    assert container.image == "ghcr.io/kubeflow/trainer/torchtune-trainer"
    assert container.command == [
        "tune",
        "run",
        "--rdzv_endpoint=tj-node-0-0.tj:29500",
        "full_finetune_distributed",
        "--config",
        f"llama3_2/{size}_full",
        *RUNTIME_PATHS,
    ]
    assert container.args == TORCHTUNE_ARGS
    assert container.resources is not None
    assert container.resources.model_dump(mode="json", exclude_none=True) == {
        "requests": {"nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    # Every job mounts the runtime's claim, named after it, at /workspace.
    for pod in rendered.pods:
        volumes = (pod.spec.model_extra or {})["volumes"]
        assert {"name": "initializer", "persistentVolumeClaim": {"claimName": runtime}} in volumes


@pytest.mark.parametrize(
    "trainer",
    [
        {"numProcPerNode": 1},
        # `auto` on CPUs only: one CPU, one process (then torchtune's single-device recipe).
        {"resourcesPerNode": {"limits": {"cpu": "1", "memory": "8Gi"}}},
    ],
)
def test_torchtune_on_one_process_is_the_single_device_recipe(trainer: dict[str, Any]) -> None:
    job = parse_job(
        trainjob("torchtune-llama3.2-1b", trainer={"command": ["tune", "run"], **trainer})
    )
    node = render_job(job).pods[-1]
    assert env(node)["PET_NPROC_PER_NODE"] == "1"
    assert node.spec.containers[0].command == [
        "tune",
        "run",
        "full_finetune_single_device",
        "--config",
        "llama3_2/1B_full_single_device",
        *RUNTIME_PATHS,
    ]


def test_torchtune_on_several_nodes_is_the_multinode_config() -> None:
    """Upstream's case for Llama 3.3 70B, the one model its webhook lets run on more nodes:
    an operator's runtime shaped as the shipped ones, named for it."""
    shipped = runtime_catalog().find(RuntimeRef(name="torchtune-llama3.2-1b"), "default")
    assert shipped is not None
    document = shipped.model_dump(mode="json", exclude_none=True)
    document["metadata"]["name"] = "torchtune-llama3.3-70b"
    runtime_catalog().add(parse_runtime(document))
    trainer = {"command": ["tune", "run"], "numNodes": 2, "numProcPerNode": 8}
    job = parse_job(trainjob("torchtune-llama3.3-70b", trainer=trainer))
    nodes = [p for p in render_job(job).pods if p.replica_type == "node"]
    assert [p.name for p in nodes] == ["tj-node-0-0", "tj-node-0-1"]
    for rank, pod in enumerate(nodes):
        assert env(pod) == {
            "JOB_COMPLETION_INDEX": str(rank),
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "8",
            "PET_NODE_RANK": str(rank),
        }
        assert pod.spec.containers[0].command == [
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_3/70B_full_multinode",
            *RUNTIME_PATHS,
        ]


def test_a_torchtune_runtime_without_tune_run_runs_its_own_command_as_torch() -> None:
    """Only a TrainJob whose command is `tune run` is torchtune's to the Torch plugin."""
    job = parse_job(
        trainjob("torchtune-llama3.2-1b", trainer={"env": [{"name": "A", "value": "1"}]})
    )
    node = render_job(job).pods[-1]
    runtime = runtime_catalog().find(RuntimeRef(name="torchtune-llama3.2-1b"), "default")
    assert runtime is not None
    (own,) = [
        c
        for j in runtime.spec.template.spec.replicatedJobs
        for c in j.containers()
        if c.name == "node"
    ]
    assert node.spec.containers[0].command == own.command
    assert env(node)["PET_MASTER_ADDR"] == "tj-node-0-0.tj" and env(node)["A"] == "1"


def test_every_shipped_runtime_is_rendered_here() -> None:
    rendered_above = {
        "torch-distributed",
        "mpi-distributed",
        "plain-distributed",
        "torchtune-llama3.2-1b",
        "torchtune-llama3.2-3b",
    }
    assert {r.metadata.name for r in shipped_runtimes()} == rendered_above


def test_initializers_come_first_and_overrides_apply() -> None:
    use_runtime_dirs([RUNTIMES])
    job = parse_job(
        trainjob(
            "torch-with-assets",
            namespace="team-a",
            runtimeRef={"name": "torch-with-assets", "kind": "TrainingRuntime"},
            initializer={
                "dataset": {"storageUri": "https://data.internal/set.tar"},
                "model": {"storageUri": "pvc://models/llama", "env": [{"name": "X", "value": "1"}]},
            },
            trainer={"numNodes": 2, "resourcesPerNode": {"requests": {"cpu": "1"}}},
            podSpecOverrides=[
                {
                    "targetJobs": [{"name": "node"}],
                    "nodeSelector": {"pool": "train"},
                    "tolerations": [{"key": "gpu", "operator": "Exists"}],
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                    "containers": [
                        {"name": "sidecar", "env": [{"name": "S", "value": "on"}]},
                    ],
                }
            ],
        )
    )
    rendered = render_job(job)
    assert [p.name for p in rendered.pods] == [
        "tj-dataset-initializer-0-0",
        "tj-model-initializer-0-0",
        "tj-node-0-0",
        "tj-node-0-1",
    ]
    dataset, model, node, _ = rendered.pods
    assert env(dataset, "dataset-initializer") == {
        "JOB_COMPLETION_INDEX": "0",
        "STORAGE_URI": "https://data.internal/set.tar",
    }
    assert env(model, "model-initializer")["STORAGE_URI"] == "pvc://models/llama"
    assert env(model, "model-initializer")["X"] == "1"
    assert env(node)["PET_NPROC_PER_NODE"] == "1" and env(node)["PET_NNODES"] == "2"
    assert node.spec.nodeSelector == {"pool": "train"}
    assert node.spec.tolerations is not None and node.spec.tolerations[0].key == "gpu"
    assert (node.spec.model_extra or {})["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    assert env(node, "sidecar") == {"S": "on"}
    assert dataset.spec.nodeSelector is None
    # The hub's demand: numNodes x resourcesPerNode plus the initializers' pods.
    assert job.total_replicas == 4 and job.replicas_of("node") == 2


def test_each_replicated_job_waits_for_those_it_depends_on() -> None:
    use_runtime_dirs([RUNTIMES])
    job = parse_job(
        trainjob(
            "torch-with-assets",
            namespace="team-a",
            runtimeRef={"name": "torch-with-assets", "kind": "TrainingRuntime"},
            trainer={"numNodes": 2},
        )
    )
    adapter = TrainJobAdapter()
    assert adapter.depends_on(job, "dataset-initializer") == ()
    assert adapter.depends_on(job, "model-initializer") == (("dataset-initializer", "Complete"),)
    assert adapter.depends_on(job, "node") == (("model-initializer", "Complete"),)
    run = JobRun(render_job(job), "c", 1)
    assert [p.name for p in run.start().create] == ["tj-dataset-initializer-0-0"]
    # Running is not Complete: nothing more yet.
    observed = run.observe(PodObservation(job.uid, "tj-dataset-initializer-0-0", "Running"))
    assert observed.create == []
    done = run.observe(PodObservation(job.uid, "tj-dataset-initializer-0-0", "Succeeded", 0))
    assert [p.name for p in done.create] == ["tj-model-initializer-0-0"]
    # The held nodes are not active, nor deleted when the job is suspended.
    assert run.counts()["node"].active == 0
    suspended = run.suspend()
    assert [p.name for p in suspended.delete] == [
        "tj-dataset-initializer-0-0",
        "tj-model-initializer-0-0",
    ]
    # Resumed, it starts over from the first step, as JobSet's Jobs are created again.
    assert [p.name for p in run.resume().create] == ["tj-dataset-initializer-0-0"]
    run.observe(PodObservation(job.uid, "tj-dataset-initializer-0-0", "Succeeded", 0))
    nodes = run.observe(PodObservation(job.uid, "tj-model-initializer-0-0", "Succeeded", 0))
    assert [p.name for p in nodes.create] == ["tj-node-0-0", "tj-node-0-1"]


def test_a_dependency_on_no_earlier_replicated_job_is_refused() -> None:
    use_runtime_dirs([RUNTIMES])
    runtime = runtime_catalog().find(RuntimeRef(name="torch-distributed"), "default")
    assert runtime is not None
    broken = runtime.model_copy(deep=True)
    broken.spec.template.spec.replicatedJobs[0].dependsOn = [{"name": "node", "status": "Done"}]
    problems: list[str] = []
    job = parse_job(trainjob("torch-distributed"))
    assert isinstance(job, TrainJob)
    assert resolve(job.spec, broken, problems) is None
    assert "dependsOn: must name an earlier replicated job ([])" in problems[0]


def test_a_jobs_own_service_names_in_its_env_reach_the_pod_on_every_network() -> None:
    address = [
        {"name": "COORDINATOR_ADDRESS", "value": "tj-node-0-0:6666"},
        {"name": "PEER", "value": "tj-node-0-1.default.svc"},
        {"name": "HOSTNAME_PEER", "value": "tj-node-0-1.tj:7777"},
        {"name": "ELSEWHERE", "value": "other-node-0-0:6666"},
        {"name": "PROCESS_ID", "value": "$(JOB_COMPLETION_INDEX)"},
    ]
    job = parse_job(trainjob("plain-distributed", trainer={"numNodes": 2, "env": address}))
    # Cluster DNS resolves them as written.
    assert env(render_job(job).pods[1])["COORDINATOR_ADDRESS"] == "tj-node-0-0:6666"
    net = LoopbackNetwork()
    first, second = render_job(job, net).pods
    port = net.port("tj-node-0-0", 6666)
    for pod in (first, second):
        assert env(pod)["COORDINATOR_ADDRESS"] == f"127.0.0.1:{port}"
        assert env(pod)["PEER"] == "127.0.0.1"
        assert env(pod)["HOSTNAME_PEER"] == f"127.0.0.1:{net.port('tj-node-0-1', 7777)}"
        assert env(pod)["ELSEWHERE"] == "other-node-0-0:6666"  # not this job's
        assert env(pod)["PROCESS_ID"] == "$(JOB_COMPLETION_INDEX)"
    assert port != 6666


def jobs_status(run: JobRun) -> list[tuple[str, int, int, int, int, int]]:
    return [
        (s.name, s.ready, s.succeeded, s.failed, s.active, s.suspended)
        for s in run.status.jobsStatus or []
    ]


def test_jobs_status_counts_each_replicated_jobs_child_job_as_jobset_does() -> None:
    """Upstream's `status.jobsStatus` (Kubeflow Trainer v2.1.0 copies JobSet's
    `replicatedJobsStatus`): per replicated job, in the runtime's order, the number of its
    child Jobs (one each) ready (succeeded + ready pods >= the pods it expects), succeeded,
    failed, active (a pod Pending or Running) and suspended; a Job not created yet counts
    nowhere."""
    use_runtime_dirs([RUNTIMES])
    job = parse_job(
        trainjob(
            "torch-with-assets",
            namespace="team-a",
            runtimeRef={"name": "torch-with-assets", "kind": "TrainingRuntime"},
            trainer={"numNodes": 2},
        )
    )
    run = JobRun(render_job(job), "c", 1)
    run.start()
    run.observe(PodObservation(job.uid, "tj-dataset-initializer-0-0", "Running"))
    assert jobs_status(run) == [
        ("dataset-initializer", 1, 0, 0, 1, 0),
        ("model-initializer", 0, 0, 0, 0, 0),
        ("node", 0, 0, 0, 0, 0),
    ]
    run.observe(PodObservation(job.uid, "tj-dataset-initializer-0-0", "Succeeded", 0))
    run.observe(PodObservation(job.uid, "tj-model-initializer-0-0", "Succeeded", 0))
    run.observe(PodObservation(job.uid, "tj-node-0-0", "Running"))
    # One of two nodes running: the node Job is active, not ready.
    assert jobs_status(run) == [
        ("dataset-initializer", 0, 1, 0, 0, 0),
        ("model-initializer", 0, 1, 0, 0, 0),
        ("node", 0, 0, 0, 1, 0),
    ]
    run.observe(PodObservation(job.uid, "tj-node-0-1", "Running"))
    assert jobs_status(run)[2] == ("node", 1, 0, 0, 1, 0)
    run.suspend()
    assert jobs_status(run) == [
        ("dataset-initializer", 0, 1, 0, 0, 0),
        ("model-initializer", 0, 1, 0, 0, 0),
        ("node", 0, 0, 0, 0, 1),
    ]
    run.resume()
    for name in ("tj-dataset-initializer-0-0", "tj-model-initializer-0-0"):
        run.observe(PodObservation(job.uid, name, "Succeeded", 0))
    run.observe(PodObservation(job.uid, "tj-node-0-0", "Succeeded", 0))
    run.observe(PodObservation(job.uid, "tj-node-0-1", "Succeeded", 0))
    assert run.phase.value == "Succeeded"
    assert jobs_status(run) == [
        ("dataset-initializer", 0, 1, 0, 0, 0),
        ("model-initializer", 0, 1, 0, 0, 0),
        ("node", 0, 1, 0, 0, 0),
    ]
    dumped = run.status.model_dump(mode="json", exclude_none=True)["jobsStatus"][2]
    assert dumped == {
        "name": "node",
        "ready": 0,
        "succeeded": 1,
        "failed": 0,
        "active": 0,
        "suspended": 0,
    }


def test_jobs_status_names_the_failed_replicated_job() -> None:
    job = parse_job(trainjob("plain-distributed", trainer={"numNodes": 2}))
    run = JobRun(render_job(job), "c", 1)
    run.start()
    run.observe(PodObservation(job.uid, "tj-node-0-0", "Running"))
    # A batch Job's pods are retried up to its backoffLimit (6), then the Job fails.
    for _ in range(7):
        run.observe(PodObservation(job.uid, "tj-node-0-1", "Failed", 3))
    assert run.phase.value == "Failed", run.status.conditions
    assert jobs_status(run) == [("node", 0, 0, 1, 0, 0)]


def test_the_v1_kinds_have_no_jobs_status() -> None:
    job = parse_job(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "pt"},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {
                        "replicas": 1,
                        "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}},
                    }
                }
            },
        }
    )
    run = JobRun(render_job(job), "c", 1)
    run.start()
    run.observe(PodObservation(job.uid, "pt-master-0", "Running"))
    assert run.status.jobsStatus is None
    assert "jobsStatus" not in run.status.model_dump(mode="json", exclude_none=True)


def volume_mounts(pod: PodPlan, container: str = "node") -> list[dict[str, Any]]:
    found = next(c for c in pod.spec.containers if c.name == container)
    return list((found.model_extra or {}).get("volumeMounts", []))


def test_mpi_ssh_auth_secret_is_made_and_mounted_as_upstream() -> None:
    """Upstream's MPI plugin (v2.0.0): an immutable `kubernetes.io/ssh-auth` Secret
    `<trainjob>-mpi-ssh-auth` (`ssh-privatekey`: an ECDSA P-521 key, PEM `EC PRIVATE KEY`;
    `ssh-publickey`: its authorized_keys line), as volume `mpi-ssh-auth` on the launcher's and
    nodes' pods (`ssh-privatekey` → id_rsa, `ssh-publickey` → id_rsa.pub and
    authorized_keys), mounted at the runtime's `sshAuthMountPath` in their `node` containers;
    the hostfile as before, on the launcher only."""
    job = parse_job(trainjob("mpi-distributed", trainer={"numNodes": 3}))
    rendered = render_job(job)
    (secret,) = rendered.secrets
    manifest = secret.manifest()
    assert manifest["metadata"]["name"] == "tj-mpi-ssh-auth"
    assert manifest["type"] == "kubernetes.io/ssh-auth" and manifest["immutable"] is True
    assert sorted(manifest["data"]) == ["ssh-privatekey", "ssh-publickey"]
    private = base64.b64decode(manifest["data"]["ssh-privatekey"]).decode()
    public = base64.b64decode(manifest["data"]["ssh-publickey"]).decode()
    assert private.startswith("-----BEGIN EC PRIVATE KEY-----\n")
    assert private.endswith("-----END EC PRIVATE KEY-----\n")
    assert public.startswith("ecdsa-sha2-nistp521 ") and public.endswith("\n")
    assert manifest in rendered.manifests()
    assert secret.labels[LABEL_JOB_UID] == job.uid

    ssh_volume = {
        "name": "mpi-ssh-auth",
        "secret": {
            "secretName": "tj-mpi-ssh-auth",
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa"},
                {"key": "ssh-publickey", "path": "id_rsa.pub"},
                {"key": "ssh-publickey", "path": "authorized_keys"},
            ],
        },
    }
    hostfile_volume = {
        "name": "mpi-hostfile",
        "configMap": {
            "name": "tj-mpi-hostfile",
            "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}],
        },
    }
    launcher, *nodes = rendered.pods
    assert (launcher.spec.model_extra or {})["volumes"] == [ssh_volume, hostfile_volume]
    # The shipped runtime's sshAuthMountPath (upstream's mpi-distributed).
    assert volume_mounts(launcher) == [
        {"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"},
        {"name": "mpi-hostfile", "mountPath": "/etc/mpi"},
    ]
    assert [p.name for p in nodes] == ["tj-node-0-0", "tj-node-0-1"]
    for node in nodes:
        assert (node.spec.model_extra or {})["volumes"] == [ssh_volume]
        assert volume_mounts(node) == [{"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"}]
        assert "OMPI_MCA_orte_default_hostfile" not in env(node)
    # The hostfile itself is unchanged.
    assert rendered.config_maps[0].data == {
        "hostfile": "tj-launcher-0-0 slots=1\ntj-node-0-0 slots=1\ntj-node-0-1 slots=1\n"
    }
    # Upstream's default mount path where the runtime names none.
    runtime = runtime_catalog().find(RuntimeRef(name="mpi-distributed"), "default")
    assert runtime is not None and runtime.spec.mlPolicy is not None
    assert runtime.spec.mlPolicy.mpi is not None
    default_path = runtime.model_copy(deep=True)
    assert default_path.spec.mlPolicy is not None and default_path.spec.mlPolicy.mpi is not None
    default_path.spec.mlPolicy.mpi.sshAuthMountPath = None
    default_path.metadata.name = "mpi-default-path"
    runtime_catalog().add(default_path)
    other = render_job(parse_job(trainjob("mpi-default-path", trainer={"numNodes": 2})))
    assert {"name": "mpi-ssh-auth", "mountPath": "/root/.ssh"} in volume_mounts(other.pods[1])


def test_other_runtimes_make_no_secret() -> None:
    for runtime in ("torch-distributed", "plain-distributed"):
        rendered = render_job(parse_job(trainjob(runtime, trainer={"numNodes": 2})))
        assert rendered.secrets == []
        assert all("mpi-ssh-auth" not in str(p.spec.model_extra) for p in rendered.pods)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_the_mpi_key_pair_is_one_openssh_reads(tmp_path: Path) -> None:
    keys = ecdsa_p521_key_pair()
    private = tmp_path / "id_rsa"
    private.write_text(keys.private_pem)
    private.chmod(0o600)
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(private)], capture_output=True, text=True, check=True
    ).stdout
    assert derived.split()[:2] == keys.authorized_key.split()[:2]
    assert keys != ecdsa_p521_key_pair()  # a fresh key each time


def test_the_p521_arithmetic_is_the_curves() -> None:
    generator = (ssh_keys.GX, ssh_keys.GY)
    assert ssh_keys.on_curve(generator)
    assert ssh_keys.multiply(ssh_keys.N, generator) is None  # the order of G
    # d = 1: the public key is G itself.
    one = ecdsa_p521_key_pair(1)
    blob = base64.b64decode(one.authorized_key.split()[1])
    assert blob.endswith(
        b"\x04" + ssh_keys.GX.to_bytes(66, "big") + ssh_keys.GY.to_bytes(66, "big")
    )
    with pytest.raises(ValueError):
        ecdsa_p521_key_pair(ssh_keys.N)


def test_torch_elastic_policy_is_accepted_and_not_applied_as_upstream() -> None:
    """Kubeflow Trainer v2.0.0's Torch plugin leaves `elasticPolicy` for when JobSet supports
    elastic Jobs: a runtime with one is valid (without `mlPolicy.numNodes`, its CEL rule), and
    its nodes get the same fixed-size torchrun variables."""
    runtime = runtime_catalog().find(RuntimeRef(name="torch-distributed"), "default")
    assert runtime is not None and runtime.spec.mlPolicy is not None
    elastic = runtime.model_dump(mode="json", exclude_none=True)
    elastic["metadata"]["name"] = "torch-elastic"
    elastic["spec"]["mlPolicy"].pop("numNodes", None)
    elastic["spec"]["mlPolicy"]["torch"]["elasticPolicy"] = {
        "minNodes": 1,
        "maxNodes": 3,
        "maxRestarts": 2,
    }
    runtime_catalog().add(parse_runtime(elastic))
    job = parse_job(trainjob("torch-elastic", trainer={"numNodes": 2}))
    _, second = render_job(job).pods
    assert env(second) == {
        "JOB_COMPLETION_INDEX": "1",
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "auto",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "tj-node-0-0.tj",
        "PET_MASTER_PORT": "29500",
    }
    # Upstream's CEL rule still holds: numNodes with an elasticPolicy is refused.
    elastic["spec"]["mlPolicy"]["numNodes"] = 2
    with pytest.raises(ValueError, match=r"numNodes should not be set if torch\.elasticPolicy"):
        parse_runtime(elastic)
