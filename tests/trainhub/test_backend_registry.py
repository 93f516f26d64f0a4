"""The backends by name: one table builds them for the embedded runner and `trainhub worker`,
and gives the CLI its choices."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from trainhub.cli import app
from trainhub.embedded import EmbeddedOptions, make_backend, make_worker_backend
from workers.backends.local import LocalBackend
from workers.backends.registry import (
    BACKENDS,
    BackendRequest,
    backend_kind,
    declared_capacity_names,
    spoken,
)
from workers.backends.registry import (
    make_backend as build,
)
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec


def test_the_table_names_every_backend() -> None:
    assert list(BACKENDS) == ["local", "sim", "kube"]
    assert declared_capacity_names() == ["local", "sim"]
    assert spoken(["a"]) == "a" and spoken(["a", "b", "c"]) == "a, b or c"
    with pytest.raises(ValueError, match=r"unknown backend 'nope': kube, local or sim"):
        backend_kind("nope")


def test_each_kind_builds_its_backend(tmp_path: Path) -> None:
    spec = parse_cluster_spec("east:cpu=4,memory=8Gi,nodes=2")
    local = build("local", BackendRequest(spec, logs_root=tmp_path, workdir=tmp_path))
    assert isinstance(local, LocalBackend) and local.logs_dir == tmp_path / "east"
    sim = build("sim", BackendRequest(spec, logs_root=tmp_path, time_scale=4.0))
    assert isinstance(sim, SimBackend) and sim.logs_dir is None and sim.time_scale == 4.0
    kept = build("sim", BackendRequest(spec, logs_root=tmp_path, keep_logs=True))
    assert isinstance(kept, SimBackend) and kept.logs_dir == tmp_path / "east"
    with pytest.raises(ValueError, match="needs --kubeconfig"):
        build("kube", BackendRequest(spec))


def test_the_embedded_runner_and_the_worker_build_through_it(tmp_path: Path) -> None:
    spec = parse_cluster_spec("east:cpu=4,memory=8Gi")
    options = EmbeddedOptions(clusters=[spec], backend="sim", logs_dir=tmp_path)
    assert isinstance(make_backend(spec, options, tmp_path), SimBackend)
    options.backend = "kube"
    with pytest.raises(ValueError, match=r"embedded runs use local or sim"):
        make_backend(spec, options, tmp_path)
    worker = make_worker_backend("local", "west", capacity="cpu=2,memory=4Gi", logs_dir=tmp_path)
    assert isinstance(worker, LocalBackend) and worker.logs_dir == tmp_path / "west"
    with pytest.raises(ValueError, match="allowed privileges by --allow"):
        make_worker_backend("sim", "west", capacity="cpu=2,memory=4Gi,allow=hostPath")


def _backend_help(command: str) -> str | None:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    option = next(p for p in group.commands[command].params if p.name == "backend")
    return getattr(option, "help", None)


def test_the_cli_offers_the_table_s_choices() -> None:
    assert _backend_help("worker") == "local, sim or kube."
    assert _backend_help("up") == "local (real processes) or sim."
    refused = CliRunner().invoke(app, ["up", "--backend", "kube"])
    assert refused.exit_code == 2
    assert "trainhub up runs local or sim clusters, not 'kube'" in refused.output
