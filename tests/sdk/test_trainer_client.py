"""Kubeflow Trainer v2's `TrainerClient` over the embedded system's in-memory bus, `sim`
backend: runtimes from trainhub's catalog, TrainJobs trained, waited for, read (status, steps,
logs) and deleted as upstream's SDK does it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bus.memory import MemoryBus
from schemas.trainer_runtimes import parse_runtime, runtime_catalog
from trainhub import TrainerClient
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.settings import TrainhubSettings
from trainhub.trainer_types import (
    CustomTrainer,
    Framework,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    Runtime,
    Step,
    Trainer,
    TrainerType,
)
from workers.cluster_spec import parse_cluster_spec

ASSETS_RUNTIME = Path(__file__).parents[1] / "data" / "trainer" / "initializer_runtime.yaml"
FAST = 0.1
"""Seconds between two looks at a job (upstream's default is 2)."""


def sim_runtime(
    name: str, duration: str, exit_code: int = 0, restart_policy: str = "Never"
) -> dict[str, Any]:
    """A plain runtime whose node pods run `duration` on `sim` and exit with `exit_code`."""
    pod = {
        "metadata": {
            "annotations": {
                "trainhub.io/sim-duration": duration,
                "trainhub.io/sim-exit-code": str(exit_code),
            }
        },
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [{"name": "node", "image": "python"}],
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/accelerator": "sim-cpu"}},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {"template": pod},
                            },
                        }
                    ]
                }
            },
        },
    }


async def _embedded(bus: MemoryBus, logs: Path) -> Embedded:
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=8,memory=16Gi,nodes=2")],
        backend="sim",
        heartbeat_interval=0.2,
        logs_dir=logs,
    )
    return await Embedded(options, bus=bus).__aenter__()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TrainerClient]:
    catalog = runtime_catalog()
    catalog.add(parse_runtime(sim_runtime("sim-long", "30s")))
    catalog.add(parse_runtime(sim_runtime("sim-crash", "0.2s", exit_code=3)))
    catalog.add(parse_runtime(sim_runtime("sim-flaky", "0.1s", 1, restart_policy="OnFailure")))
    assets = yaml.safe_load(ASSETS_RUNTIME.read_text("utf-8"))
    assets["kind"] = "ClusterTrainingRuntime"  # the operator's runtime, cluster-wide here
    del assets["metadata"]["namespace"]
    catalog.add(parse_runtime(assets))
    bus = MemoryBus()
    trainer = TrainerClient(settings=TrainhubSettings(), bus=bus)
    system = trainer.hub.run_on_loop(_embedded(bus, tmp_path))
    try:
        yield trainer
    finally:
        trainer.hub.run_on_loop(trainer.hub.aio.close())
        trainer.hub.run_on_loop(system.__aexit__(None, None, None))
        trainer.close()


def train_mnist(lr: float) -> None:
    print("training with lr", lr)


def test_runtimes_are_the_catalogs_cluster_runtimes(client: TrainerClient) -> None:
    runtimes = {r.name: r for r in client.list_runtimes()}
    assert {"torch-distributed", "mpi-distributed", "plain-distributed"} <= set(runtimes)
    torch = runtimes["torch-distributed"]
    assert torch.trainer.trainer_type == TrainerType.CUSTOM_TRAINER
    assert torch.trainer.framework == Framework.TORCH
    assert torch.trainer.entrypoint == ["torchrun"]
    assert torch.trainer.accelerator_count == "Unknown"  # numProcPerNode: auto
    mpi = runtimes["mpi-distributed"].trainer
    assert mpi.framework == Framework.MPI
    assert mpi.entrypoint is not None and mpi.entrypoint[0] == "mpirun"
    assert mpi.accelerator_count == 1  # numProcPerNode 1 x numNodes 1
    assert runtimes["plain-distributed"].trainer.framework == Framework.PLAIN
    assert runtimes["sim-long"].trainer.accelerator == "sim-cpu"
    assert client.get_runtime("mpi-distributed") == runtimes["mpi-distributed"]
    with pytest.raises(RuntimeError, match="known runtimes: mpi-distributed"):
        client.get_runtime("no-such-runtime")


def test_a_function_trains_on_torch_to_complete_with_steps_and_logs(
    client: TrainerClient, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = CustomTrainer(
        func=train_mnist,
        func_args={"lr": 0.1},
        num_nodes=2,
        resources_per_node={"cpu": 2, "memory": "1Gi"},
    )
    name = client.train(runtime=client.get_runtime("torch-distributed"), trainer=trainer)
    assert len(name) == 12 and name[0].isalpha()

    done = client.wait_for_job_status(name, status={"Complete"}, timeout=60, polling_interval=FAST)
    assert done.name == name
    assert done.status == "Complete"
    assert done.runtime.name == "torch-distributed"
    assert done.steps == [
        Step("node-0", "Succeeded", f"{name}-node-0-0", device="cpu", device_count="2"),
        Step("node-1", "Succeeded", f"{name}-node-0-1", device="cpu", device_count="2"),
    ]
    assert client.get_job(name) == done

    # The TrainJob as trainhub has it: the function under torchrun, on two nodes.
    document = client.hub.get_job(name).spec
    assert document is not None
    spec = document["spec"]
    assert spec["runtimeRef"]["name"] == "torch-distributed"
    assert spec["trainer"]["numNodes"] == 2
    assert spec["trainer"]["resourcesPerNode"]["limits"] == {"cpu": "2", "memory": "1Gi"}
    assert spec["trainer"]["command"] == ["bash", "-c"]
    assert 'exec torchrun "$program_dir/train_func.py"' in spec["trainer"]["args"][0]

    logs = client.get_job_logs(name)
    assert list(logs) == ["node-0"]
    assert f"[sim] {name}-node-0-0 is Succeeded (exit code 0)" in logs["node-0"]
    second = client.get_job_logs(name, node_rank=1)
    assert f"{name}-node-0-1 is Running" in second["node-1"]
    assert client.get_job_logs(name, step="dataset-initializer") == {}
    followed = client.get_job_logs(name, follow=True, node_rank=1)
    assert followed == second
    assert f"[node-1]: [sim] {name}-node-0-1 is Succeeded (exit code 0)" in capsys.readouterr().out

    assert [j.name for j in client.list_jobs()] == [name]
    assert client.list_jobs(runtime=client.get_runtime("mpi-distributed")) == []

    client.delete_job(name)
    with pytest.raises(RuntimeError, match="deleted"):
        client.get_job(name)
    assert client.list_jobs() == []


def test_initializers_fetch_the_dataset_and_model_before_the_nodes(
    client: TrainerClient,
) -> None:
    initializer = Initializer(
        dataset=HuggingFaceDatasetInitializer("hf://tatsu-lab/alpaca", access_token="hf_x"),
        model=HuggingFaceModelInitializer("hf://org/tiny-model"),
    )
    name = client.train(runtime=client.get_runtime("torch-with-assets"), initializer=initializer)
    done = client.wait_for_job_status(name, timeout=60, polling_interval=FAST)
    assert [(s.name, s.status, s.pod_name) for s in done.steps] == [
        ("dataset-initializer", "Succeeded", f"{name}-dataset-initializer-0-0"),
        ("model-initializer", "Succeeded", f"{name}-model-initializer-0-0"),
        ("node-0", "Succeeded", f"{name}-node-0-0"),
    ]
    document = client.hub.get_job(name).spec
    assert document is not None
    assert document["spec"]["initializer"] == {
        "dataset": {
            "storageUri": "hf://tatsu-lab/alpaca",
            "env": [{"name": "ACCESS_TOKEN", "value": "hf_x"}],
        },
        "model": {"storageUri": "hf://org/tiny-model"},
    }
    logs = client.get_job_logs(name, step="dataset-initializer")
    assert list(logs) == ["dataset-initializer"]
    assert f"{name}-dataset-initializer-0-0 is Succeeded" in logs["dataset-initializer"]


def test_an_mpi_trainjob_names_its_launcher_node_0(client: TrainerClient) -> None:
    trainer = CustomTrainer(func=train_mnist, func_args={"lr": 0.5}, num_nodes=2)
    name = client.train(runtime=client.get_runtime("mpi-distributed"), trainer=trainer)
    done = client.wait_for_job_status(name, timeout=60, polling_interval=FAST)
    assert [(s.name, s.pod_name) for s in done.steps] == [
        ("node-0", f"{name}-launcher-0-0"),
        ("node-1", f"{name}-node-0-0"),
    ]
    assert done.steps[0].status == "Succeeded"
    document = client.hub.get_job(name).spec
    assert document is not None
    assert document["spec"]["trainer"]["command"] == [
        "mpirun",
        "--hostfile",
        "/etc/mpi/hostfile",
        "bash",
        "-c",
    ]


def test_a_running_trainjob_is_waited_for_then_deleted(client: TrainerClient) -> None:
    name = client.train(runtime=client.get_runtime("sim-long"))
    running = client.wait_for_job_status(
        name, status={"Running"}, timeout=60, polling_interval=FAST
    )
    assert running.status == "Running"
    assert running.steps == [Step("node-0", "Running", f"{name}-node-0-0")]
    with pytest.raises(TimeoutError, match="Complete"):
        client.wait_for_job_status(name, timeout=0.5, polling_interval=FAST)
    client.delete_job(name)
    with pytest.raises(RuntimeError):
        client.delete_job(name)


def test_a_steps_status_is_its_pods_phase_as_the_worker_tells_it(client: TrainerClient) -> None:
    """A node in crash backoff waits Pending between its runs; the replica counts have it
    active all along, which can only say Running."""
    name = client.train(runtime=client.get_runtime("sim-flaky"))
    deadline = time.monotonic() + 20
    job = client.get_job(name)
    while job.steps[:1] != [Step("node-0", "Pending", f"{name}-node-0-0")]:
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
        job = client.get_job(name)
    assert job.status == "Running"
    counts = client.hub.get_job(name).status.replicaStatuses["node"]
    assert (counts.active, counts.succeeded, counts.failed) == (1, 0, 0)
    client.delete_job(name)


def test_a_failed_trainjob_fails_the_wait_unless_failed_is_waited_for(
    client: TrainerClient,
) -> None:
    name = client.train(runtime=client.get_runtime("sim-crash"))
    with pytest.raises(RuntimeError, match="is Failed"):
        client.wait_for_job_status(name, timeout=60, polling_interval=FAST)
    failed = client.wait_for_job_status(name, status={"Failed"}, timeout=5, polling_interval=FAST)
    assert failed.status == "Failed"
    assert failed.steps[0].status == "Failed"


def test_bad_arguments_are_value_errors(client: TrainerClient) -> None:
    with pytest.raises(ValueError, match="subset of"):
        client.wait_for_job_status("any", status={"Succeeded"})
    with pytest.raises(ValueError, match="exceeds timeout"):
        client.wait_for_job_status("any", timeout=1, polling_interval=2)
    with pytest.raises(ValueError, match="not supported"):
        client.train(trainer="python train.py")  # type: ignore[arg-type]
    unknown = Runtime("no-such-runtime", Trainer(TrainerType.CUSTOM_TRAINER, Framework.TORCH))
    with pytest.raises(ValueError, match="known runtimes"):
        client.train(runtime=unknown)
    # torch-distributed has no dataset initializer to fetch it with (upstream's admission).
    dataset = Initializer(dataset=HuggingFaceDatasetInitializer("hf://some/dataset"))
    with pytest.raises(ValueError, match="dataset-initializer"):
        client.train(initializer=dataset)
    with pytest.raises(ValueError, match="kube-config"):
        TrainerClient(config_file="~/.kube/config")
    with pytest.raises(RuntimeError, match="no job"):
        client.get_job("never-made")
