"""A Python function as a PyTorchJob: the document, the command line, and what `trainhub
render` makes of it (torch is not installed: the torchrun path is checked as rendered)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.job_parsing import parse_job
from schemas.run_policy import TRAINHUB_MANAGER
from tests.cli import run_trainhub
from trainhub.sdk_functions import function_command, function_script, job_from_function


def train(greeting: str, count: int = 1) -> None:
    import sys

    for i in range(count):
        print(f"{greeting} {i}", "quote ' and \" and $HOME stay as written")
    print("argv0", sys.argv[0].rsplit("/", 1)[-1])


def _container(document: dict[str, Any], rtype: str = "Master") -> dict[str, Any]:
    spec = document["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]
    container: dict[str, Any] = spec["containers"][0]
    return container


def _run_script(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The container's `bash -c` line, run here (our interpreter as `python`)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )


def test_one_worker_runs_the_function_under_python_u(tmp_path: Path) -> None:
    document = job_from_function(
        train, name="hello", parameters={"greeting": "hi", "count": 2}, queue="research"
    )
    job = parse_job(document)
    assert job.kind == "PyTorchJob" and job.metadata.namespace == "default"
    assert list(job.replica_specs) == ["Master"] and job.replicas_of("Master") == 1
    assert job.run_policy.managedBy == TRAINHUB_MANAGER
    assert job.run_policy.backoffLimit == 3
    assert job.metadata.annotations == {"trainhub.io/train-func": "train (python -u)"}
    assert job.run_policy.schedulingPolicy is not None
    assert job.run_policy.schedulingPolicy.queue == "research"
    container = _container(document)
    assert container["name"] == "pytorch"
    assert container["image"] == "docker.io/pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime"
    assert container["command"] == ["bash", "-c"]
    script = container["args"][0]
    assert 'exec python -u "$program_dir/train_func.py"' in script
    assert "torchrun" not in script and "pip" not in script
    result = _run_script(script, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "hi 0 quote ' and \" and $HOME stay as written",
        "hi 1 quote ' and \" and $HOME stay as written",
        "argv0 train_func.py",
    ]


def test_distributed_function_job_renders_master_workers_and_torchrun(tmp_path: Path) -> None:
    document = job_from_function(
        train,
        name="dist",
        namespace="team-a",
        num_workers=3,
        num_procs_per_worker=2,
        resources_per_worker={"cpu": 2, "memory": "4Gi", "gpu": 1},
        env_vars={"EPOCHS": "5"},
        base_image="pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
        packages_to_install=["transformers==4.44.0", "datasets>=2"],
        pip_index_url="https://pypi.example/simple",
    )
    spec = document["spec"]
    assert spec["nprocPerNode"] == "2"
    assert spec["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    for rtype in ("Master", "Worker"):
        container = _container(document, rtype)
        amounts = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
        assert container["resources"] == {"requests": amounts, "limits": amounts}
        assert container["env"] == [{"name": "EPOCHS", "value": "5"}]
        script = container["args"][0]
        assert 'exec torchrun "$program_dir/train_func.py"' in script
        assert (
            "python -m pip install --quiet --no-warn-script-location "
            "--index-url https://pypi.example/simple transformers==4.44.0 'datasets>=2'"
        ) in script
    path = tmp_path / "dist.yaml"
    path.write_text(yaml.safe_dump(document))
    rendered = run_trainhub("render", str(path), "-o", "json", timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    pods = {o["metadata"]["name"]: o for o in json.loads(rendered.stdout) if o["kind"] == "Pod"}
    assert sorted(pods) == ["dist-master-0", "dist-worker-0", "dist-worker-1"]
    for name, rank in (("dist-master-0", "0"), ("dist-worker-0", "1"), ("dist-worker-1", "2")):
        container = next(c for c in pods[name]["spec"]["containers"] if c["name"] == "pytorch")
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["PET_NODE_RANK"] == rank and env["RANK"] == rank
        assert env["PET_NNODES"] == "3" and env["PET_NPROC_PER_NODE"] == "2"
        assert env["PET_MASTER_ADDR"] == "dist-master-0"
        assert env["PET_MASTER_PORT"] == "23456" and env["WORLD_SIZE"] == "6"
        assert env["EPOCHS"] == "5"
        assert container["command"] == ["bash", "-c"]
        assert container["args"][0].endswith('exec torchrun "$program_dir/train_func.py"')
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_num_procs_alone_makes_it_torchrun() -> None:
    _, args = function_command(train, distributed=True)
    assert "exec torchrun" in args[0]
    document = job_from_function(train, name="solo", num_procs_per_worker="auto")
    assert list(document["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    assert document["spec"]["nprocPerNode"] == "auto"
    assert "exec torchrun" in _container(document)["args"][0]


def test_bad_functions_and_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="defined with `def`"):
        function_script(lambda: None, None)
    with pytest.raises(ValueError, match="JSON values"):
        function_script(train, {"greeting": object()})
    with pytest.raises(ValueError, match="num_workers"):
        job_from_function(train, name="x", num_workers=0)
    wrong: list[tuple[dict[str, Any], str]] = [
        ({"num_workers": "2"}, "num_workers must be a whole number"),
        ({"num_procs_per_worker": 0}, "num_procs_per_worker"),
        ({"num_procs_per_worker": "bogus"}, "num_procs_per_worker"),
        ({"resources_per_worker": ["cpu"]}, "resources_per_worker: a mapping"),
        ({"resources_per_worker": {1: 2}}, "resources_per_worker: a mapping"),
        ({"env_vars": [{"value": "1"}]}, "env_vars: each item needs a name"),
    ]
    for arguments, message in wrong:
        with pytest.raises(ValueError, match=message):
            job_from_function(train, name="x", **arguments)
    for procs in (2, "4", "auto", "gpu"):
        job = job_from_function(train, name="x", num_procs_per_worker=procs)
        assert job["spec"]["nprocPerNode"] == str(procs)
    # One package given as a string is that package, not its letters.
    command = json.dumps(job_from_function(train, name="x", packages_to_install="torch"))
    assert "--no-warn-script-location torch\\n" in command and "t o r c h" not in command


def train_with_one_dict(args: dict[str, object]) -> None:  # upstream's style
    print("lr", args["lr"], "epochs", args["epochs"])


def test_parameters_reach_upstream_style_functions_as_one_dict(tmp_path: Path) -> None:
    # Upstream calls train_func(parameters); keyword arguments stay for functions whose
    # signature takes them.
    document = job_from_function(
        train_with_one_dict, name="dict-style", parameters={"lr": 0.1, "epochs": 2}
    )
    result = _run_script(_container(document)["args"][0], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["lr 0.1 epochs 2"]


def test_env_vars_and_resources_as_upstream_writes_them() -> None:
    class EnvVar:  # as kubernetes.client.V1EnvVar
        def __init__(self, name: str, value: str) -> None:
            self.name, self.value = name, value

    document = job_from_function(
        train,
        name="upstream-args",
        env_vars=[{"name": "A", "value": "1"}, EnvVar("B", "2")],
        resources_per_worker={"CPU": 1, "Memory": "2Gi", "GPU": 1},
    )
    container = _container(document)
    assert container["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert container["resources"]["requests"] == {
        "cpu": "1",
        "memory": "2Gi",
        "nvidia.com/gpu": "1",
    }
    with pytest.raises(ValueError, match="each item needs a name"):
        job_from_function(train, name="bad-env", env_vars=[{"value": "1"}])
