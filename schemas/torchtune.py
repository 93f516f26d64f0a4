"""Upstream's Torch plugin for a TrainJob whose trainer runs torchtune (`command: [tune, run]`),
as kubeflow/trainer v2.0.0 has it (pkg/runtime/framework/plugins/torch/torch.go, constants in
pkg/constants): the admission rules on the runtime's model and the node count, and the
command the trainer's node runs: `tune run`, the rendezvous endpoint where more than one
process trains, the full-finetune recipe and config the node and process counts choose, and
the runtime's own output, tokenizer and checkpoint paths. The TrainJob's `args` (the
BuiltinTrainer's overrides) follow unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TORCHTUNE_ENTRYPOINT = ("tune", "run")
RDZV_ENDPOINT_ARG = "--rdzv_endpoint"
CONFIG_ARG = "--config"
SINGLE_DEVICE_RECIPE = "full_finetune_single_device"
DISTRIBUTED_RECIPE = "full_finetune_distributed"
SINGLE_DEVICE_SUFFIX = "_full_single_device"
MULTI_DEVICES_SUFFIX = "_full"
MULTI_NODES_SUFFIX = "_full_multinode"
IMMUTABLE_CONFIGS = frozenset({"output_dir", "tokenizer.path", "checkpointer.checkpoint_dir"})
"""The runtime command's `key=value` items a TrainJob's command keeps."""
SUPPORTED_MODELS = frozenset({"llama3_2/1B", "llama3_2/7B", "llama3_3/70B"})
"""v2.0.0's list, as written there (it has no llama3_2/3B: v2.1.0 added it; the rule only
applies to a TrainJob that sets `numProcPerNode`, which the SDK's never does)."""
MULTI_NODE_MODEL = "llama3_3/70B"


def runs_torchtune(command: Sequence[str] | None) -> bool:
    return tuple(command or ()) == TORCHTUNE_ENTRYPOINT


def model_of_runtime(runtime_name: str) -> str:
    """`torchtune-llama3.2-1b` -> `llama3_2/1B`; "" for a name not of three dash-parts."""
    fields = runtime_name.split("-")
    if len(fields) != 3:
        return ""
    return f"{fields[1].replace('.', '_')}/{fields[2].upper()}"


def torchtune_problems(runtime_name: str, num_nodes: int | None) -> list[str]:
    """Upstream's webhook on a torchtune TrainJob: a model it fine-tunes, one node but for
    Llama 3.3 70B."""
    model = model_of_runtime(runtime_name)
    problems = []
    if model not in SUPPORTED_MODELS:
        problems.append(
            f"spec.runtimeRef.name: must have a supported pretrained model, invalid model "
            f"configured: {model} (got {runtime_name!r})"
        )
    if num_nodes is not None and num_nodes > 1 and model != MULTI_NODE_MODEL:
        problems.append(f"spec.trainer.numNodes: must be 1 for {model} model (got {num_nodes})")
    return problems


@dataclass(frozen=True)
class TorchTuneLaunch:
    """What the Torch plugin adds to a torchtune TrainJob's `tune run`."""

    recipe: str
    config: str
    overrides: tuple[str, ...]
    """The runtime's immutable `key=value` items, in its command's order."""
    rendezvous: bool
    """More than one node or process: torchtune's rendezvous at node 0."""

    def command(self, job_name: str, port: int) -> list[str]:
        """The trainer node's command; node 0 is `<job>-node-0-0.<job>` (JobSet's DNS)."""
        endpoint = [f"{RDZV_ENDPOINT_ARG}={job_name}-node-0-0.{job_name}:{port}"]
        return [
            *TORCHTUNE_ENTRYPOINT,
            *(endpoint if self.rendezvous else []),
            self.recipe,
            CONFIG_ARG,
            self.config,
            *self.overrides,
        ]


def torchtune_launch(
    runtime_name: str, num_nodes: int, proc_per_node: str, runtime_command: Sequence[str]
) -> TorchTuneLaunch:
    """The launch for `num_nodes` nodes of `proc_per_node` processes (the Torch plugin's
    value: a number, `auto`, `cpu` or `gpu`); one process on one node is a single device."""
    single = num_nodes == 1 and proc_per_node == "1"
    recipe, suffix = DISTRIBUTED_RECIPE, MULTI_DEVICES_SUFFIX
    if single:
        recipe, suffix = SINGLE_DEVICE_RECIPE, SINGLE_DEVICE_SUFFIX
    elif num_nodes > 1:
        suffix = MULTI_NODES_SUFFIX
    overrides = tuple(c for c in runtime_command if c.split("=")[0] in IMMUTABLE_CONFIGS)
    return TorchTuneLaunch(
        recipe=recipe,
        config=f"{model_of_runtime(runtime_name)}{suffix}",
        overrides=overrides,
        rendezvous=not single,
    )
