"""Kubeflow Trainer v2's `BuiltinTrainer` (TorchTune) in `TrainerClient`: the TrainJob's
trainer as upstream's SDK builds it, and a fine-tune on the shipped torchtune runtime run
end to end over the in-memory bus and `sim`.

Expected args are written by hand from the SDK's last revision in kubeflow/trainer (parent of
a4a337610: sdk/kubeflow/trainer/utils/utils.py, `get_args_using_torchtune_config`): each
setting given (a truthy one) as a `key=value` override in its order, dtype, batch_size,
epochs, loss, the dataset's place under /workspace/dataset, then the instruct dataset's. Two
values are kubeflow/sdk's later fix of that text, as trainhub/trainer_torchtune.py says: enum
values (`dtype=bf16`) and a path inside the dataset repository kept under /workspace/dataset."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bus.memory import MemoryBus
from schemas.job_parsing import parse_placed_job
from schemas.sim_annotations import SIM_DURATION
from schemas.trainer import RuntimeRef
from schemas.trainer_runtimes import parse_runtime, runtime_catalog, runtime_document
from trainhub import TrainerClient
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.settings import TrainhubSettings
from trainhub.trainer_client import runtime_view
from trainhub.trainer_torchtune import builtin_trainer_spec, torchtune_args
from trainhub.trainer_types import (
    BuiltinTrainer,
    CustomTrainer,
    DataFormat,
    DataType,
    Framework,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    Loss,
    TorchTuneConfig,
    TorchTuneInstructDataset,
    Trainer,
    TrainerType,
)
from workers.cluster_spec import parse_cluster_spec
from workers.rendering import render_job

FAST = 0.1
"""Seconds between two looks at a job (upstream's default is 2)."""
TORCHTUNE_RUNTIMES = ("torchtune-llama3.2-1b", "torchtune-llama3.2-3b")
INSTRUCT = "dataset=torchtune.datasets.instruct_dataset"
LOSS = "loss=torchtune.modules.loss.CEWithChunkedOutputLoss"


def dataset(storage_uri: str) -> Initializer:
    return Initializer(dataset=HuggingFaceDatasetInitializer(storage_uri))


# -- the args -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "initializer", "expected"),
    [
        (TorchTuneConfig(), None, []),
        (
            TorchTuneConfig(
                dtype=DataType.BF16, batch_size=16, epochs=2, loss=Loss.CEWithChunkedOutputLoss
            ),
            None,
            ["dtype=bf16", "batch_size=16", "epochs=2", LOSS],
        ),
        # Upstream tests truth: 0 is "not given".
        (TorchTuneConfig(dtype=DataType.FP32, batch_size=0, epochs=0), None, ["dtype=fp32"]),
        # The initializer's dataset: the repository's root, a folder in it, a file in it.
        (
            TorchTuneConfig(),
            dataset("hf://tatsu-lab/alpaca"),
            ["dataset.data_dir=/workspace/dataset/"],
        ),
        (
            TorchTuneConfig(),
            dataset("hf://tatsu-lab/alpaca/data"),
            ["dataset.data_dir=/workspace/dataset/data"],
        ),
        (
            TorchTuneConfig(),
            dataset("hf://tatsu-lab/alpaca/data/train-00000.parquet"),
            ["dataset.data_files=/workspace/dataset/data/train-00000.parquet"],
        ),
        # trainhub's own sources are fetched into /workspace/dataset itself (a plain path is
        # one of them, where upstream would have read hf://).
        (TorchTuneConfig(), dataset("pvc://sets/alpaca"), ["dataset.data_dir=/workspace/dataset/"]),
        (
            TorchTuneConfig(),
            dataset("/sets/alpaca/a.json"),
            ["dataset.data_dir=/workspace/dataset/"],
        ),
        # A model alone says nothing about the dataset.
        (
            TorchTuneConfig(epochs=1),
            Initializer(model=HuggingFaceModelInitializer("hf://meta-llama/Llama-3.2-1B")),
            ["epochs=1"],
        ),
        (
            TorchTuneConfig(dataset_preprocess_config=TorchTuneInstructDataset()),
            None,
            [INSTRUCT],
        ),
        (
            TorchTuneConfig(
                dataset_preprocess_config=TorchTuneInstructDataset(
                    source=DataFormat.JSON,
                    split="train[:10%]",
                    train_on_input=True,
                    new_system_prompt="Answer briefly.",
                    column_map={"input": "question", "output": "answer"},
                )
            ),
            None,
            [
                INSTRUCT,
                "dataset.source=json",
                "dataset.split=train[:10%]",
                "dataset.train_on_input=True",
                "dataset.new_system_prompt=Answer briefly.",
                "dataset.column_map={'input': 'question', 'output': 'answer'}",
            ],
        ),
        # False is torchtune's default: upstream leaves it out.
        (
            TorchTuneConfig(
                dataset_preprocess_config=TorchTuneInstructDataset(train_on_input=False)
            ),
            None,
            [INSTRUCT],
        ),
        # Everything: the data's place comes before the instruct dataset's settings.
        (
            TorchTuneConfig(
                dtype=DataType.BF16,
                epochs=3,
                loss=Loss.CEWithChunkedOutputLoss,
                dataset_preprocess_config=TorchTuneInstructDataset(source=DataFormat.PARQUET),
            ),
            dataset("hf://tatsu-lab/alpaca/data"),
            [
                "dtype=bf16",
                "epochs=3",
                LOSS,
                "dataset.data_dir=/workspace/dataset/data",
                INSTRUCT,
                "dataset.source=parquet",
            ],
        ),
    ],
)
def test_args_are_upstreams_overrides(
    config: TorchTuneConfig, initializer: Initializer | None, expected: list[str]
) -> None:
    assert torchtune_args(config, initializer) == expected


def test_the_trainer_is_tune_run_with_nodes_and_resources() -> None:
    config = TorchTuneConfig(
        epochs=1, num_nodes=1, resources_per_node={"GPU": 2, "CPU": 8, "memory": "64Gi"}
    )
    amounts = {"nvidia.com/gpu": "2", "cpu": "8", "memory": "64Gi"}
    assert builtin_trainer_spec(BuiltinTrainer(config)) == {
        "numNodes": 1,
        "resourcesPerNode": {"requests": amounts, "limits": amounts},
        "command": ["tune", "run"],
        "args": ["epochs=1"],
    }
    # Nothing given: the runtime's nodes and resources, the recipe config's settings.
    assert builtin_trainer_spec(BuiltinTrainer(TorchTuneConfig(num_nodes=0))) == {
        "command": ["tune", "run"],
        "args": [],
    }


@pytest.mark.parametrize(
    ("trainer", "says"),
    [
        (BuiltinTrainer(TorchTuneConfig(dtype="bf16")), "Invalid dtype: bf16."),  # type: ignore[arg-type]
        (
            BuiltinTrainer(
                TorchTuneConfig(
                    dataset_preprocess_config=TorchTuneInstructDataset(source="json")  # type: ignore[arg-type]
                )
            ),
            "Invalid data format: json.",
        ),
        (
            BuiltinTrainer(TorchTuneConfig(dataset_preprocess_config={"source": "json"})),  # type: ignore[arg-type]
            "Invalid dataset preprocess config type: <class 'dict'>.",
        ),
        (BuiltinTrainer(config={"epochs": 1}), "The BuiltinTrainer config is invalid"),  # type: ignore[arg-type]
    ],
)
def test_bad_configs_are_upstreams_value_errors(trainer: BuiltinTrainer, says: str) -> None:
    with pytest.raises(ValueError) as raised:
        builtin_trainer_spec(trainer)
    assert says in str(raised.value)


# -- runtimes -----------------------------------------------------------------------------


def test_the_torchtune_runtimes_are_builtin_trainers() -> None:
    for name in TORCHTUNE_RUNTIMES:
        runtime = runtime_catalog().find(RuntimeRef(name=name), "default")
        assert runtime is not None
        view = runtime_view(runtime)
        assert view.name == name
        # Two GPUs on the one node (numProcPerNode auto leaves the count to the limits).
        assert view.trainer == Trainer(
            TrainerType.BUILTIN_TRAINER,
            Framework.TORCHTUNE,
            entrypoint=["tune", "run"],
            accelerator_count=2,
        )


def _other_runtime(image: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    torch = runtime_catalog().find(RuntimeRef(name="torch-distributed"), "default")
    assert torch is not None
    document = runtime_document(torch)
    document["metadata"] = {"name": "mine", **({"labels": labels} if labels else {})}
    node = document["spec"]["template"]["spec"]["replicatedJobs"][0]
    node["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return document


@pytest.mark.parametrize(
    ("image", "labels", "builtin"),
    [
        ("ghcr.io/kubeflow/trainer/torchtune-trainer:v2.0.0", None, True),
        ("ghcr.io/kubeflow/trainer/torchtune-trainer@sha256:" + "0" * 64, None, True),
        # v2.1.0's runtimes say it with a label.
        ("example.com/tune:1", {"trainer.kubeflow.org/framework": "torchtune"}, True),
        ("example.com/torchtune-trainer:1", None, False),
        ("pytorch/pytorch:2.7.1", {"trainer.kubeflow.org/framework": "torch"}, False),
    ],
)
def test_a_runtime_is_torchtunes_by_its_image_or_framework_label(
    image: str, labels: dict[str, str] | None, builtin: bool
) -> None:
    trainer = runtime_view(parse_runtime(_other_runtime(image, labels))).trainer
    assert trainer.trainer_type == (
        TrainerType.BUILTIN_TRAINER if builtin else TrainerType.CUSTOM_TRAINER
    )
    assert trainer.framework == (Framework.TORCHTUNE if builtin else Framework.TORCH)


# -- TrainerClient.train ------------------------------------------------------------------


def _simulated(document: dict[str, Any], duration: str) -> dict[str, Any]:
    """The runtime with every replicated job's pods ending after `duration` on `sim`."""
    simulated = copy.deepcopy(document)
    for job in simulated["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]
        pod.setdefault("metadata", {}).setdefault("annotations", {})[SIM_DURATION] = duration
    return simulated


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TrainerClient]:
    """tests/sdk/test_trainer_client.py's client, on a cluster with GPUs, with the shipped
    torchtune runtimes' pods quick on `sim`."""
    catalog = runtime_catalog()
    for name in TORCHTUNE_RUNTIMES:
        shipped = catalog.find(RuntimeRef(name=name), "default")
        assert shipped is not None
        catalog.add(parse_runtime(_simulated(runtime_document(shipped), "0.2s")))
    bus = MemoryBus()
    trainer = TrainerClient(settings=TrainhubSettings(), bus=bus)
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("gpus:cpu=16,memory=64Gi,gpu=2,nodes=1")],
        backend="sim",
        heartbeat_interval=0.2,
        logs_dir=tmp_path,
    )
    system = trainer.hub.run_on_loop(Embedded(options, bus=bus).__aenter__())
    try:
        yield trainer
    finally:
        trainer.hub.run_on_loop(trainer.hub.aio.close())
        trainer.hub.run_on_loop(system.__aexit__(None, None, None))
        trainer.close()


def test_a_builtin_trainer_fine_tunes_on_torchtune_to_complete(client: TrainerClient) -> None:
    runtime = client.get_runtime("torchtune-llama3.2-1b")
    assert runtime.trainer.trainer_type == TrainerType.BUILTIN_TRAINER
    initializer = Initializer(
        dataset=HuggingFaceDatasetInitializer("hf://tatsu-lab/alpaca/data"),
        model=HuggingFaceModelInitializer(
            "hf://meta-llama/Llama-3.2-1B-Instruct", access_token="hf_x"
        ),
    )
    trainer = BuiltinTrainer(
        config=TorchTuneConfig(
            dtype=DataType.BF16,
            epochs=1,
            num_nodes=1,
            dataset_preprocess_config=TorchTuneInstructDataset(source=DataFormat.PARQUET),
            resources_per_node={"gpu": 1},
        )
    )
    name = client.train(runtime=runtime, initializer=initializer, trainer=trainer)

    done = client.wait_for_job_status(name, timeout=60, polling_interval=FAST)
    assert done.status == "Complete"
    assert done.runtime == runtime
    assert [(s.name, s.status, s.pod_name) for s in done.steps] == [
        ("dataset-initializer", "Succeeded", f"{name}-dataset-initializer-0-0"),
        ("model-initializer", "Succeeded", f"{name}-model-initializer-0-0"),
        ("node-0", "Succeeded", f"{name}-node-0-0"),
    ]
    assert (done.steps[2].device, done.steps[2].device_count) == ("gpu", "1")

    # The TrainJob as the hub received it: upstream's trainer for the BuiltinTrainer.
    job = client.hub.get_job(name)
    assert job.spec is not None
    spec = job.spec["spec"]
    assert spec["runtimeRef"]["name"] == "torchtune-llama3.2-1b"
    gpu = {"nvidia.com/gpu": "1"}
    assert spec["trainer"] == {
        "command": ["tune", "run"],
        "args": [
            "dtype=bf16",
            "epochs=1",
            "dataset.data_dir=/workspace/dataset/data",
            INSTRUCT,
            "dataset.source=parquet",
        ],
        "numNodes": 1,
        "resourcesPerNode": {"requests": gpu, "limits": gpu},
    }
    assert spec["initializer"] == {
        "dataset": {"storageUri": "hf://tatsu-lab/alpaca/data"},
        "model": {
            "storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct",
            "env": [{"name": "ACCESS_TOKEN", "value": "hf_x"}],
        },
    }
    # What its node ran: the Torch plugin's recipe and config, then the args.
    (node,) = [
        p
        for p in render_job(parse_placed_job(job.spec, job.runtime)).pods
        if p.replica_type == "node"
    ]
    container = next(c for c in node.spec.containers if c.name == "node")
    assert container.command == [
        "tune",
        "run",
        f"--rdzv_endpoint={name}-node-0-0.{name}:29500",
        "full_finetune_distributed",
        "--config",
        "llama3_2/1B_full",
        "output_dir=/workspace/output",
        "tokenizer.path=/workspace/model/original/tokenizer.model",
        "checkpointer.checkpoint_dir=/workspace/model",
    ]
    assert container.args == spec["trainer"]["args"]
    assert [j.name for j in client.list_jobs(runtime=runtime)] == [name]


def test_each_trainer_takes_only_runtimes_of_its_type(client: TrainerClient) -> None:
    torchtune = client.get_runtime("torchtune-llama3.2-1b")
    torch = client.get_runtime("torch-distributed")
    builtin = BuiltinTrainer(config=TorchTuneConfig(epochs=1))
    with pytest.raises(ValueError) as raised:
        client.train(runtime=torch, trainer=builtin)
    assert str(raised.value) == f"BuiltinTrainer can't be used with {torch} runtime"
    assert str(raised.value).startswith("BuiltinTrainer can't be used with Runtime(name=")

    def train_func() -> None:
        print("training")

    with pytest.raises(ValueError) as raised:
        client.train(runtime=torchtune, trainer=CustomTrainer(func=train_func))
    assert str(raised.value) == f"CustomTrainer can't be used with {torchtune} runtime"
    with pytest.raises(ValueError, match=r"Please use CustomTrainer or BuiltinTrainer\."):
        client.train(runtime=torchtune, trainer=TorchTuneConfig())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="The BuiltinTrainer config is invalid"):
        client.train(runtime=torchtune, trainer=BuiltinTrainer(config=None))  # type: ignore[arg-type]
    assert client.list_jobs() == []
