"""A `BuiltinTrainer` as the TrainJob's `trainer`, as Kubeflow Trainer v2's SDK builds it (its
last revision in kubeflow/trainer, the parent of a4a337610: utils.py's
`get_trainer_crd_from_builtin_trainer`, `get_args_using_torchtune_config` and
`get_args_in_dataset_preprocess_config`): command `tune run`, the config's settings as
torchtune `key=value` overrides in upstream's order, `numNodes` and `resourcesPerNode`.
The Torch plugin adds the recipe and config (schemas/torchtune.py).

Two places differ from that revision's text, as kubeflow/sdk later fixed them: the enums'
values are written (`dtype=bf16`, not the member's name `DataType.BF16`, which torchtune
cannot read) and a dataset path inside the repository stays under /workspace/dataset
(`hf://tatsu-lab/alpaca/data` -> `dataset.data_dir=/workspace/dataset/data`, where joining
the path from the root gave `/data`)."""

from __future__ import annotations

from enum import Enum
from posixpath import join
from typing import Any
from urllib.parse import urlparse

from trainhub.sdk_functions import container_resources
from trainhub.trainer_types import (
    TORCHTUNE_COMMAND,
    BuiltinTrainer,
    DataFormat,
    DataType,
    HuggingFaceDatasetInitializer,
    Initializer,
    TorchTuneConfig,
    TorchTuneInstructDataset,
)

DATASET_PATH = "/workspace/dataset"
"""Where the dataset initializer puts the dataset (upstream's DATASET_PATH)."""
INSTRUCT_DATASET = "torchtune.datasets.instruct_dataset"


def _word(value: object) -> object:
    return value.value if isinstance(value, Enum) else value


def dataset_location(storage_uri: str) -> str:
    """Where torchtune reads the initializer's dataset: for `hf://<owner>/<name>/<path>`,
    the path under /workspace/dataset, `data_files` when it names a file (has a dot),
    else `data_dir`. trainhub's other sources (pvc://, http(s)://, file://, paths) are
    fetched into /workspace/dataset itself."""
    if not storage_uri.startswith("hf://"):
        return f"dataset.data_dir={join(DATASET_PATH, '')}"
    inside = "/".join(urlparse(storage_uri).path.strip("/").split("/")[1:])
    key = "data_files" if "." in inside else "data_dir"
    return f"dataset.{key}={join(DATASET_PATH, inside)}"


def instruct_dataset_args(config: TorchTuneInstructDataset) -> list[str]:
    """torchtune's `instruct_dataset` with the settings given (None or empty: the recipe's)."""
    if not isinstance(config, TorchTuneInstructDataset):
        raise ValueError(f"Invalid dataset preprocess config type: {type(config)}.")
    args = [f"dataset={INSTRUCT_DATASET}"]
    if config.source:
        if not isinstance(config.source, DataFormat):
            raise ValueError(f"Invalid data format: {config.source}.")
        args.append(f"dataset.source={config.source.value}")
    if config.split:
        args.append(f"dataset.split={config.split}")
    if config.train_on_input:  # False is torchtune's default: upstream leaves it out
        args.append(f"dataset.train_on_input={config.train_on_input}")
    if config.new_system_prompt:
        args.append(f"dataset.new_system_prompt={config.new_system_prompt}")
    if config.column_map:
        args.append(f"dataset.column_map={config.column_map}")
    return args


def torchtune_args(config: TorchTuneConfig, initializer: Initializer | None = None) -> list[str]:
    """The TrainJob's `args`: the config's overrides of the runtime's recipe config (0 and
    empty values are left out, as upstream tests truth), then where the dataset is."""
    args = []
    if config.dtype:
        if not isinstance(config.dtype, DataType):
            raise ValueError(f"Invalid dtype: {config.dtype}.")
        args.append(f"dtype={config.dtype.value}")
    if config.batch_size:
        args.append(f"batch_size={config.batch_size}")
    if config.epochs:
        args.append(f"epochs={config.epochs}")
    if config.loss:
        args.append(f"loss={_word(config.loss)}")
    if isinstance(initializer, Initializer) and isinstance(
        initializer.dataset, HuggingFaceDatasetInitializer
    ):
        args.append(dataset_location(initializer.dataset.storage_uri))
    if config.dataset_preprocess_config:
        args += instruct_dataset_args(config.dataset_preprocess_config)
    return args


def builtin_trainer_spec(
    trainer: BuiltinTrainer, initializer: Initializer | None = None
) -> dict[str, Any]:
    """The TrainJob's `trainer` for a BuiltinTrainer."""
    config = trainer.config
    if not isinstance(config, TorchTuneConfig):
        raise ValueError(f"The BuiltinTrainer config is invalid: {config}")
    spec: dict[str, Any] = {}
    if config.num_nodes:
        spec["numNodes"] = config.num_nodes
    if config.resources_per_node:
        amounts = container_resources(config.resources_per_node)
        spec["resourcesPerNode"] = {"requests": amounts, "limits": dict(amounts)}
    spec["command"] = list(TORCHTUNE_COMMAND)
    spec["args"] = torchtune_args(config, initializer)
    return spec
