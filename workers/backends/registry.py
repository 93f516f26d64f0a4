"""The worker backends by name: what `--backend` accepts and how each one is built.

Adding a backend is one entry in `BACKENDS` (and its module): the embedded runner, `trainhub
worker` and `trainhub up` take their choices from this table."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from workers.backends.base import Backend
from workers.backends.local import LocalBackend
from workers.backends.sim import SimBackend
from workers.cluster_spec import ClusterSpec
from workers.gang_scheduling import GangScheduling


@dataclass(frozen=True)
class BackendRequest:
    """What a backend is built from; each kind takes the parts it needs."""

    cluster: ClusterSpec
    """The cluster's name, and its declared capacity for the kinds that simulate one."""
    logs_root: Path | None = None
    """Pod logs go under `<logs_root>/<cluster>`: local needs it; sim keeps them there only
    when `keep_logs` (a sim pod's log is a line per phase, kept in memory anyway)."""
    keep_logs: bool = False
    workdir: Path = field(default_factory=Path.cwd)
    """local: the pods' working directory."""
    pvc_dir: Path | None = None
    """local: the directories standing for PersistentVolumeClaims (claim C is `<dir>/C`)."""
    time_scale: float = 1.0
    """sim: how much faster than written the pods run."""
    kubeconfig: Path | None = None
    context: str | None = None
    namespaces: list[str] | None = None
    """kube: the namespaces the worker may create in (None: all)."""
    gang_scheduling: GangScheduling | None = None
    """kube: the gang scheduler whose PodGroups the worker makes (None: none)."""
    delegate: bool = False
    """kube: hand each job to the cluster's Training Operator instead of making its pods."""
    managed_by: str | None = None
    """kube in delegate mode: the objects' `runPolicy.managedBy` (None: unset, the
    operator's own)."""

    def logs_dir(self) -> Path | None:
        return None if self.logs_root is None else self.logs_root / self.cluster.name


@dataclass(frozen=True)
class BackendKind:
    name: str
    build: Callable[[BackendRequest], Backend]
    declared_capacity: bool
    """Its capacity is declared (`--capacity`, `--cluster NAME:cpu=...`), not read from a
    real cluster: it can run inside `trainhub up`."""
    note: str = ""
    """A word on it for `trainhub up --help`."""


def _local(request: BackendRequest) -> Backend:
    _no_gangs(request, "local")
    logs = request.logs_dir()
    if logs is None:
        raise ValueError("the local backend needs a directory for its pods' logs")
    return LocalBackend(
        request.cluster.pool(), workdir=request.workdir, logs_dir=logs, pvc_dir=request.pvc_dir
    )


def _sim(request: BackendRequest) -> Backend:
    _no_gangs(request, "sim")
    logs = request.logs_dir() if request.keep_logs else None
    return SimBackend(request.cluster.pool(), time_scale=request.time_scale, logs_dir=logs)


def _no_gangs(request: BackendRequest, kind: str) -> None:
    if request.gang_scheduling is not None:
        raise ValueError(
            f"--gang-scheduler needs --backend kube (the {kind} backend has no scheduler)"
        )
    if request.delegate:
        raise ValueError(
            f"--mode delegate needs --backend kube (the {kind} backend has no operator)"
        )
    if request.managed_by is not None:
        raise ValueError("--delegate-managed-by needs --mode delegate")


def _kube(request: BackendRequest) -> Backend:
    if request.kubeconfig is None:
        raise ValueError("the kube backend needs --kubeconfig (and usually --context)")
    if request.delegate:
        if request.gang_scheduling is not None:
            raise ValueError(
                "--mode delegate leaves gang scheduling to the cluster's Training Operator "
                "(its --gang-scheduler-name): leave out --gang-scheduler"
            )
        delegate = importlib.import_module("workers.backends.kube_delegate")
        return cast(
            Backend,
            delegate.KubeDelegateBackend(
                kubeconfig=request.kubeconfig,
                context=request.context,
                cluster=request.cluster.name,
                namespaces=request.namespaces,
                managed_by=request.managed_by,
            ),
        )
    if request.managed_by is not None:
        raise ValueError("--delegate-managed-by needs --mode delegate")
    # Imported on use: kubernetes_asyncio is heavy, and embedded runs never need it.
    kube = importlib.import_module("workers.backends.kube")
    return cast(
        Backend,
        kube.KubeBackend(
            kubeconfig=request.kubeconfig,
            context=request.context,
            cluster=request.cluster.name,
            namespaces=request.namespaces,
            gang_scheduling=request.gang_scheduling,
        ),
    )


BACKENDS: dict[str, BackendKind] = {
    kind.name: kind
    for kind in (
        BackendKind("local", _local, declared_capacity=True, note="real processes"),
        BackendKind("sim", _sim, declared_capacity=True),
        BackendKind("kube", _kube, declared_capacity=False),
    )
}


def backend_kind(name: str) -> BackendKind:
    """The kind named `name`; ValueError naming the known ones."""
    kind = BACKENDS.get(name)
    if kind is None:
        raise ValueError(f"unknown backend {name!r}: {spoken(sorted(BACKENDS))}")
    return kind


def declared_capacity_names() -> list[str]:
    """The kinds that run inside one process on declared capacity (`trainhub up`)."""
    return [kind.name for kind in BACKENDS.values() if kind.declared_capacity]


def make_backend(name: str, request: BackendRequest) -> Backend:
    return backend_kind(name).build(request)


def spoken(names: Iterable[str]) -> str:
    """`a, b or c`."""
    listed = list(names)
    if len(listed) < 2:
        return "".join(listed)
    return f"{', '.join(listed[:-1])} or {listed[-1]}"
