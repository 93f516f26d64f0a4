"""A Python function as a Kubeflow PyTorchJob, as the Training Operator SDK builds it: the
function's source is written to a file in the container and run under `python -u`, or under
`torchrun` (which reads the `PET_*` variables the worker sets) when the job is distributed."""

from __future__ import annotations

import base64
import inspect
import json
import shlex
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from schemas.run_policy import TRAINHUB_MANAGER

DEFAULT_BASE_IMAGE = "docker.io/pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime"
"""Upstream's default: Python with torch, so `torchrun` is there for distributed runs."""
CONTAINER = "pytorch"
SCRIPT_NAME = "train_func.py"
FUNCTION_ANNOTATION = "trainhub.io/train-func"
"""On a job made from a function: the function's name and how it runs (for `describe`)."""
DEFAULT_BACKOFF_LIMIT = 3
"""Kubeflow leaves it unlimited, so a function with a bug restarts forever; the SDK stops."""

_RESOURCE_ALIASES = {"gpu": "nvidia.com/gpu"}
# Decodes the base64 source into the script file: no quoting of the source is ever needed.
_WRITE_SCRIPT = "import base64,sys; open(sys.argv[1], 'wb').write(base64.b64decode(sys.argv[2]))"


def job_from_function(
    train_func: Callable[..., Any],
    *,
    name: str,
    namespace: str = "default",
    parameters: Mapping[str, Any] | None = None,
    num_workers: int = 1,
    num_procs_per_worker: int | str | None = None,
    resources_per_worker: Mapping[str, Any] | None = None,
    env_vars: Mapping[str, Any] | Sequence[Any] | None = None,
    base_image: str = DEFAULT_BASE_IMAGE,
    packages_to_install: Sequence[str] | None = None,
    pip_index_url: str | None = None,
    queue: str | None = None,
    restart_policy: str = "OnFailure",
    backoff_limit: int | None = DEFAULT_BACKOFF_LIMIT,
) -> dict[str, Any]:
    """The PyTorchJob document: a Master and `num_workers - 1` Workers, managed by trainhub."""
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
        raise ValueError(f"num_workers must be a whole number, at least 1 (got {num_workers!r})")
    if num_procs_per_worker is not None and not _procs_per_node(num_procs_per_worker):
        raise ValueError(
            "num_procs_per_worker: a number of processes (1 or more), or auto, cpu or gpu "
            f"(got {num_procs_per_worker!r})"
        )
    if resources_per_worker is not None and (
        not isinstance(resources_per_worker, Mapping)
        or not all(isinstance(k, str) for k in resources_per_worker)
    ):
        raise ValueError(
            "resources_per_worker: a mapping of resource name to amount, e.g. "
            f"{{'cpu': 2, 'memory': '4Gi', 'gpu': 1}} (got {resources_per_worker!r})"
        )
    if isinstance(packages_to_install, str):
        packages_to_install = [packages_to_install]  # one package, not its letters
    distributed = num_workers > 1 or num_procs_per_worker is not None
    command, args = function_command(
        train_func,
        parameters,
        distributed=distributed,
        packages_to_install=packages_to_install,
        pip_index_url=pip_index_url,
    )
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": base_image,
        "command": command,
        "args": args,
    }
    if env_vars:
        container["env"] = environment(env_vars)
    if resources_per_worker:
        amounts = container_resources(resources_per_worker)
        container["resources"] = {"requests": amounts, "limits": dict(amounts)}
    replica_specs = {"Master": _replica(1, container, restart_policy)}
    if num_workers > 1:
        replica_specs["Worker"] = _replica(num_workers - 1, container, restart_policy)
    run_policy: dict[str, Any] = {"managedBy": TRAINHUB_MANAGER}
    if backoff_limit is not None:
        run_policy["backoffLimit"] = backoff_limit
    if queue is not None:
        run_policy["schedulingPolicy"] = {"queue": queue}
    spec: dict[str, Any] = {"runPolicy": run_policy, "pytorchReplicaSpecs": replica_specs}
    if num_procs_per_worker is not None:
        spec["nprocPerNode"] = str(num_procs_per_worker)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {
                FUNCTION_ANNOTATION: f"{train_func.__name__} "
                f"({'torchrun' if distributed else 'python -u'})"
            },
        },
        "spec": spec,
    }


def _procs_per_node(value: object) -> bool:
    """torchrun's --nproc-per-node: a positive count, or auto, cpu or gpu."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 1
    return isinstance(value, str) and (
        value in ("auto", "cpu", "gpu") or (value.isdigit() and int(value) >= 1)
    )


def _replica(replicas: int, container: dict[str, Any], restart_policy: str) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": restart_policy,
        "template": {"spec": {"containers": [json.loads(json.dumps(container))]}},
    }


def environment(env_vars: Mapping[str, Any] | Sequence[Any]) -> list[dict[str, str]]:
    """`{"NAME": value}`, or upstream's list of `{"name", "value"}` (or objects with those
    attributes, as kubernetes' V1EnvVar), as a container's `env`."""
    if isinstance(env_vars, Mapping):
        return [{"name": str(k), "value": str(v)} for k, v in env_vars.items()]
    variables = []
    for item in env_vars:
        if isinstance(item, Mapping):
            name, value = item.get("name"), item.get("value")
        else:
            name, value = getattr(item, "name", None), getattr(item, "value", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"env_vars: each item needs a name (got {item!r})")
        variables.append({"name": name, "value": "" if value is None else str(value)})
    return variables


def container_resources(resources: Mapping[str, Any]) -> dict[str, str]:
    """Resource amounts as quantities; `gpu` means `nvidia.com/gpu`."""
    plain = {k if "/" in k else k.lower(): v for k, v in resources.items()}  # CPU, GPU too
    return {_RESOURCE_ALIASES.get(k, k): str(v) for k, v in plain.items()}


def function_script(train_func: Callable[..., Any], parameters: Mapping[str, Any] | None) -> str:
    """The Python file the container runs: the function's source and a call of it."""
    if not inspect.isfunction(train_func) or train_func.__name__ == "<lambda>":
        raise ValueError(
            f"train_func must be a function defined with `def` (got {train_func!r}); its "
            "source is what runs, so it imports what it needs inside"
        )
    try:
        source = textwrap.dedent(inspect.getsource(train_func))
    except (OSError, TypeError) as exc:
        raise ValueError(f"cannot read the source of {train_func.__name__}: {exc}") from exc
    try:
        arguments = json.dumps(dict(parameters or {}))
    except TypeError as exc:
        raise ValueError(f"parameters must be JSON values: {exc}") from exc
    call = "" if parameters is None else "_trainhub_parameters"
    return (
        f"{source}\n\n"
        'if __name__ == "__main__":\n'
        "    import inspect as _trainhub_inspect\n"
        "    import json as _trainhub_json\n\n"
        f"    _trainhub_parameters = _trainhub_json.loads({arguments!r})\n"
        f"    _trainhub_function = {train_func.__name__}\n"
        "    try:  # keyword arguments where they fit the signature, else upstream's one dict\n"
        "        _trainhub_inspect.signature(_trainhub_function).bind(**_trainhub_parameters)\n"
        "    except TypeError:\n"
        f"        _trainhub_function({call})\n"
        "    else:\n"
        "        _trainhub_function(**_trainhub_parameters)\n"
    )


def function_command(
    train_func: Callable[..., Any],
    parameters: Mapping[str, Any] | None = None,
    *,
    distributed: bool,
    packages_to_install: Sequence[str] | None = None,
    pip_index_url: str | None = None,
) -> tuple[list[str], list[str]]:
    """Container `command` and `args`: a `bash -c` line that installs the packages, writes
    the script to a fresh directory and runs it."""
    encoded = base64.b64encode(function_script(train_func, parameters).encode()).decode()
    lines = ["set -e"]
    if packages_to_install:
        index = f" --index-url {shlex.quote(pip_index_url)}" if pip_index_url else ""
        packages = " ".join(shlex.quote(p) for p in packages_to_install)
        lines.append(
            "PIP_DISABLE_PIP_VERSION_CHECK=1 python -m pip install --quiet "
            f"--no-warn-script-location{index} {packages}"
        )
    runner = "torchrun" if distributed else "python -u"
    lines += [
        'program_dir="$(mktemp -d)"',
        f'python -c {shlex.quote(_WRITE_SCRIPT)} "$program_dir/{SCRIPT_NAME}" {encoded}',
        f'exec {runner} "$program_dir/{SCRIPT_NAME}"',
    ]
    return ["bash", "-c"], ["\n".join(lines)]
