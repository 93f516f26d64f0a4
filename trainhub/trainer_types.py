"""The objects of Kubeflow Trainer v2's Python SDK (`kubeflow.trainer` types: runtimes, trainers,
initializers, TrainJobs and their steps) as `TrainerClient` takes and returns them, with
upstream's names, fields and defaults (the SDK's last revision in kubeflow/trainer, the parent
of a4a337610 "Remove SDK", June 2025: sdk/kubeflow/trainer/types/types.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

UNKNOWN = "Unknown"
NODE = "node"
LAUNCHER = "launcher"
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
DEFAULT_RUNTIME_NAME = "torch-distributed"
DEFAULT_PIP_INDEX_URL = "https://pypi.org/simple"

TRAINJOB_CREATED = "Created"
TRAINJOB_RUNNING = "Running"
TRAINJOB_COMPLETE = "Complete"
TRAINJOB_FAILED = "Failed"
TRAINJOB_STATUSES = frozenset(
    {TRAINJOB_CREATED, TRAINJOB_RUNNING, TRAINJOB_COMPLETE, TRAINJOB_FAILED}
)
"""What `TrainJob.status` says and `wait_for_job_status` waits for."""

TORCH_ENTRYPOINT = "torchrun"
MPI_ENTRYPOINT = "mpirun"
MPI_HOSTFILE = "/etc/mpi/hostfile"
TORCHTUNE_COMMAND = ("tune", "run")
"""Upstream's DEFAULT_TORCHTUNE_COMMAND: a BuiltinTrainer's TrainJob command."""


@dataclass
class CustomTrainer:
    """A self-contained function (imports inside) that trains the model, run on every node of
    the runtime's image: `func_args` its keyword arguments, `packages_to_install` pip-installed
    from `pip_index_url` first, `num_nodes` and `resources_per_node` (`{"cpu": 2, "memory":
    "4Gi", "gpu": 1}`: requests and limits) the TrainJob's `trainer`."""

    func: Callable[..., Any]
    func_args: dict[str, Any] | None = None
    packages_to_install: list[str] | None = None
    pip_index_url: str = DEFAULT_PIP_INDEX_URL
    num_nodes: int | None = None
    resources_per_node: dict[str, Any] | None = None


class Loss(Enum):
    """The loss a TorchTune fine-tune minimises (upstream has this one only)."""

    CEWithChunkedOutputLoss = "torchtune.modules.loss.CEWithChunkedOutputLoss"


class DataType(Enum):
    """The data type of the model's and optimizer's parameters."""

    BF16 = "bf16"
    FP32 = "fp32"


class DataFormat(Enum):
    """The format of the dataset's files (Hugging Face `load_dataset`'s builders)."""

    JSON = "json"
    CSV = "csv"
    PARQUET = "parquet"
    ARROW = "arrow"
    TEXT = "text"
    XML = "xml"


@dataclass
class TorchTuneInstructDataset:
    """A dataset of instructions and answers (torchtune's `instruct_dataset`): its files'
    `source` format, the `split` to read (`train[:10%]`), whether the prompt is trained on
    too (`train_on_input`), a system prompt put first (`new_system_prompt`), and the columns
    that hold the `input` and `output` (`column_map`: `{"input": "question", ...}`)."""

    source: DataFormat | None = None
    split: str | None = None
    train_on_input: bool | None = None
    new_system_prompt: str | None = None
    column_map: dict[str, str] | None = None


@dataclass
class TorchTuneConfig:
    """The settings a torchtune runtime's recipe is run with, each left to the recipe's
    config where None: `dtype`, `batch_size`, `epochs`, `loss`, the dataset's preprocessing
    (`dataset_preprocess_config`), and the TrainJob's `num_nodes` and `resources_per_node`
    (`{"gpu": 1}`: requests and limits)."""

    dtype: DataType | None = None
    batch_size: int | None = None
    epochs: int | None = None
    loss: Loss | None = None
    num_nodes: int | None = None
    dataset_preprocess_config: TorchTuneInstructDataset | None = None
    resources_per_node: dict[str, Any] | None = None


@dataclass
class BuiltinTrainer:
    """A trainer the runtime's image already holds (torchtune's fine-tune recipes), run with
    `config`: only for a runtime whose trainer type is BUILTIN_TRAINER."""

    config: TorchTuneConfig


class TrainerType(Enum):
    CUSTOM_TRAINER = "CustomTrainer"
    BUILTIN_TRAINER = "BuiltinTrainer"


class Framework(Enum):
    """Upstream's frameworks; `mpi` and `plain` are trainhub's names for the runtimes whose
    ML policy is MPI's, or none (upstream's PlainML: JAX and the like)."""

    TORCH = "torch"
    DEEPSPEED = "deepspeed"
    MLX = "mlx"
    TORCHTUNE = "torchtune"
    MPI = "mpi"
    PLAIN = "plain"


@dataclass
class Trainer:
    """How a runtime trains: its framework, the entrypoint its trainer node runs a function
    under, and the accelerator (the runtime's `trainer.kubeflow.org/accelerator` label) and
    how many of them all its nodes have together."""

    trainer_type: TrainerType
    framework: Framework
    entrypoint: list[str] | None = None
    accelerator: str = UNKNOWN
    accelerator_count: str | float | int = UNKNOWN


@dataclass
class Runtime:
    name: str
    trainer: Trainer
    pretrained_model: str | None = None


@dataclass
class Step:
    """One pod of a TrainJob: `dataset-initializer`, `model-initializer` or `node-<rank>`."""

    name: str
    status: str | None
    pod_name: str
    device: str = UNKNOWN
    device_count: str | int = UNKNOWN


@dataclass
class TrainJob:
    name: str
    creation_timestamp: datetime
    runtime: Runtime
    steps: list[Step] = field(default_factory=list)
    status: str | None = UNKNOWN


@dataclass
class HuggingFaceDatasetInitializer:
    storage_uri: str
    access_token: str | None = None


@dataclass
class HuggingFaceModelInitializer:
    storage_uri: str
    access_token: str | None = None


@dataclass
class Initializer:
    """The dataset and pre-trained model the runtime's initializers fetch before training."""

    dataset: HuggingFaceDatasetInitializer | None = None
    model: HuggingFaceModelInitializer | None = None
