"""`local`'s volumes: the `initializer` volume is the job's workspace, a claim a directory
under the configured PVC directory, and paths under their mounts in the variables and args
are rewritten; upstream's initializer images run trainhub's initializer."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from schemas.pod import Container, PodSpec
from workers.backends.local_volumes import LocalVolumes, UnmappableVolume, localized
from workers.backends.pod_env import ProcessSpec, process_spec
from workers.rendering import LABEL_JOB_NAME, PodPlan


def pod(container: dict[str, Any], volumes: list[dict[str, Any]]) -> PodPlan:
    spec = PodSpec.model_validate({"containers": [container], "volumes": volumes})
    return PodPlan(
        name="tune-node-0-0",
        namespace="team-a",
        replica_type="node",
        index=0,
        labels={LABEL_JOB_NAME: "tune"},
        annotations={},
        spec=spec,
        restart_policy="Never",
        default_container=container["name"],
    )


def local(plan: PodPlan, volumes: LocalVolumes) -> ProcessSpec:
    container: Container = plan.main_container
    spec, _ = localized(plan, container, process_spec(plan, container, "local"), volumes)
    return spec


SHARED = {"name": "initializer", "persistentVolumeClaim": {"claimName": "tune"}}


def test_paths_under_the_workspace_and_a_claim_are_rewritten(tmp_path: Path) -> None:
    volumes = LocalVolumes(workspaces=tmp_path / "ws", pvc_dir=tmp_path / "pvc")
    plan = pod(
        {
            "name": "node",
            "image": "x",
            "command": ["tune", "dataset.data_dir=/workspace/dataset/data", "/scratch/out"],
            "args": ["--config", "/etc/x", "/workspaces-not", "--out=/ckpt/run"],
            "env": [
                {"name": "DATA", "value": "/workspace/dataset"},
                {"name": "ROOT", "value": "/workspace"},
                {"name": "OTHER", "value": "/tmp/workspace"},
            ],
            "volumeMounts": [
                {"name": "initializer", "mountPath": "/workspace"},
                {"name": "ckpt", "mountPath": "/ckpt", "subPath": "runs"},
                {"name": "scratch", "mountPath": "/scratch"},
            ],
        },
        [
            SHARED,
            {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}},
            {"name": "scratch", "emptyDir": {}},
        ],
    )
    spec = local(plan, volumes)
    workspace = tmp_path / "ws" / "team-a" / "tune"
    assert spec.argv == [
        "tune",
        f"dataset.data_dir={workspace}/dataset/data",
        "/scratch/out",  # an emptyDir is not mapped
        "--config",
        "/etc/x",
        "/workspaces-not",
        f"--out={tmp_path}/pvc/checkpoints/runs/run",
    ]
    assert spec.env == {
        "DATA": f"{workspace}/dataset",
        "ROOT": str(workspace),
        "OTHER": "/tmp/workspace",
    }


def test_a_claim_without_a_pvc_dir_stays_as_written_with_a_warning(tmp_path: Path) -> None:
    plan = pod(
        {
            "name": "node",
            "image": "x",
            "command": ["run", "/ckpt/a"],
            "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
        },
        [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}}],
    )
    spec = local(plan, LocalVolumes(workspaces=tmp_path))
    assert spec.argv == ["run", "/ckpt/a"]
    assert "TRAINHUB_LOCAL_PVC_DIR" in spec.warnings[0] and "'checkpoints'" in spec.warnings[0]


def test_upstreams_initializer_image_runs_trainhubs_initializer(tmp_path: Path) -> None:
    volumes = LocalVolumes(workspaces=tmp_path / "ws", pvc_dir=tmp_path / "pvc")
    initializer = {
        "name": "model-initializer",
        "image": "ghcr.io/kubeflow/trainer/model-initializer:v2.0.0",
        "env": [{"name": "STORAGE_URI", "value": "pvc://models/llama"}],
        "volumeMounts": [
            {"name": "initializer", "mountPath": "/workspace"},
            {"name": "pvc-source", "mountPath": "/mnt/pvc", "readOnly": True},
        ],
    }
    source = {"name": "pvc-source", "persistentVolumeClaim": {"claimName": "models"}}
    spec = local(pod(initializer, [SHARED, source]), volumes)
    assert spec.argv == [sys.executable, "-m", "workers.initializer", "model"]
    assert spec.env["TRAINHUB_WORKSPACE"] == str(tmp_path / "ws" / "team-a" / "tune")
    assert spec.env["TRAINHUB_PVC_MOUNT"] == str(tmp_path / "pvc" / "models")
    # Without a mount of /workspace, the job's workspace all the same.
    bare = {k: v for k, v in initializer.items() if k != "volumeMounts"}
    bare["env"] = [{"name": "STORAGE_URI", "value": "hf://org/model"}]
    spec = local(pod(bare, []), volumes)
    assert spec.env["TRAINHUB_WORKSPACE"] == str(tmp_path / "ws" / "team-a" / "tune")
    # A command of the runtime's own is run as written.
    own = local(pod({**bare, "command": ["fetch-it"]}, []), volumes)
    assert own.argv == ["fetch-it"]
    with pytest.raises(UnmappableVolume, match="TRAINHUB_LOCAL_PVC_DIR"):
        local(pod(initializer, [SHARED, source]), LocalVolumes(workspaces=tmp_path))
