"""The all-in-one runner: in-memory (or given) bus, the hub and one worker per cluster."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bus.base import Bus
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub
from schemas.cluster import ClusterPolicy
from schemas.events import JobStatusUpdate
from trainhub.processes import without_created_series
from trainhub.producer import follow_status, submit_document
from trainhub.settings import TrainhubSettings
from workers.backends.base import Backend, PodLogsUnavailable
from workers.backends.registry import (
    BACKENDS,
    BackendRequest,
    backend_kind,
    declared_capacity_names,
    spoken,
)
from workers.cluster_spec import ClusterSpec, parse_cluster_spec
from workers.gang_scheduling import GangScheduling
from workers.worker import Worker


@dataclass
class EmbeddedOptions:
    clusters: list[ClusterSpec]
    backend: str = "local"
    heartbeat_interval: float = 1.0
    max_heartbeat_age: float = 10.0
    """The embedded runner's own timings (a deployment's are slower); they override
    `settings`'."""
    settings: TrainhubSettings = field(default_factory=TrainhubSettings)
    """Every other hub and worker setting (placement, exclusion, waiting status...)."""
    workdir: Path = field(default_factory=Path.cwd)
    logs_dir: Path | None = None
    sim_time_scale: float = 1.0

    def effective_settings(self) -> TrainhubSettings:
        return self.settings.model_copy(
            update={
                "heartbeat_interval": self.heartbeat_interval,
                "max_heartbeat_age": self.max_heartbeat_age,
            }
        )


def make_backend(spec: ClusterSpec, options: EmbeddedOptions, logs_root: Path) -> Backend:
    kind = BACKENDS.get(options.backend)
    if kind is None or not kind.declared_capacity:
        choices = spoken(declared_capacity_names())
        raise ValueError(f"unknown backend {options.backend!r} (embedded runs use {choices})")
    request = BackendRequest(
        spec,
        logs_root=logs_root,
        keep_logs=options.logs_dir is not None,
        workdir=options.workdir,
        time_scale=options.sim_time_scale,
        pvc_dir=_path(options.settings.local_pvc_dir),
    )
    return kind.build(request)


def make_worker_backend(
    kind: str,
    cluster: str,
    *,
    capacity: str,
    kubeconfig: Path | None = None,
    context: str | None = None,
    logs_dir: Path | None = None,
    namespaces: list[str] | None = None,
    gang_scheduling: GangScheduling | None = None,
    delegate: bool = False,
    managed_by: str | None = None,
    pvc_dir: str | None = None,
) -> Backend:
    """The backend of a standalone `trainhub worker` process; `delegate`: one that hands
    each job to the cluster's Training Operator (`--mode delegate`), giving its objects
    `managed_by` (`--delegate-managed-by`; None: unset); `pvc_dir`: local's directory
    standing for PersistentVolumeClaims (`--local-pvc-dir`)."""
    chosen = backend_kind(kind)
    spec = ClusterSpec(name=cluster)
    if chosen.declared_capacity:
        spec = parse_cluster_spec(f"{cluster}:{capacity}")
        if spec.policy != ClusterPolicy():
            raise ValueError("--capacity: a worker's pods are allowed privileges by --allow NAME")
    request = BackendRequest(
        spec,
        logs_root=logs_dir or Path.home() / ".cache" / "trainhub" / "logs",
        keep_logs=logs_dir is not None,
        kubeconfig=kubeconfig,
        context=context,
        namespaces=namespaces,
        gang_scheduling=gang_scheduling,
        delegate=delegate,
        managed_by=managed_by,
        pvc_dir=_path(pvc_dir),
    )
    return chosen.build(request)


def _path(setting: str | None) -> Path | None:
    return None if not setting else Path(setting).expanduser()


class Embedded:
    """`async with Embedded(options) as system:` starts everything; leaving stops it all."""

    def __init__(
        self,
        options: EmbeddedOptions,
        *,
        bus: Bus | None = None,
        topics: Topics | None = None,
        registry: CollectorRegistry | None = None,
        backends: Mapping[str, Backend] | None = None,
        namespaces: Mapping[str, list[str]] | None = None,
    ) -> None:
        """`backends`: the clusters' backends by name, made by the caller (kube clusters),
        and the namespaces each may create in; else one backend per `options.clusters`."""
        without_created_series()
        self.options = options
        self.bus: Bus = bus or MemoryBus()
        self.topics = topics or Topics()
        self.registry = registry or CollectorRegistry()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        logs_root = options.logs_dir
        if logs_root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="trainhub-logs-")
            logs_root = Path(self._tmp.name)
        self.logs_root = logs_root
        settings = options.effective_settings()
        self.hub = Hub(self.bus, self.topics, settings.hub_config(), registry=self.registry)
        if backends is None:
            backends = {s.name: make_backend(s, options, logs_root) for s in options.clusters}
        specs = {s.name: s for s in options.clusters}
        self.workers = [
            Worker(
                self.bus,
                backend,
                settings.worker_config(
                    name,
                    labels=specs[name].labels if name in specs else {},
                    namespaces=(namespaces or {}).get(name),
                    policy=specs[name].policy if name in specs else ClusterPolicy(),
                ),
                self.topics,
                registry=self.registry,
            )
            for name, backend in backends.items()
        ]

    async def __aenter__(self) -> Embedded:
        await self.bus.start()
        await self.hub.start()
        for worker in self.workers:
            await worker.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        # The hub first: the jobs the stopping workers hand back have nowhere to go.
        await self.hub.stop()
        for worker in self.workers:
            await worker.stop()
        await self.bus.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    async def submit(self, document: dict[str, Any]) -> str:
        return await submit_document(self.bus, self.topics, document)

    def worker(self, cluster: str) -> Worker:
        return next(w for w in self.workers if w.cluster == cluster)

    async def updates(self, uids: Iterable[str] | None = None) -> AsyncIterator[JobStatusUpdate]:
        async for update in follow_status(self.bus, self.topics, uids):
            yield update

    async def wait_finished(
        self,
        uids: Iterable[str],
        on_update: Callable[[JobStatusUpdate], Any] | None = None,
        timeout: float | None = None,
    ) -> dict[str, JobStatusUpdate]:
        """Follow status until every job reached a final phase; returns the final updates."""
        pending = set(uids)
        final: dict[str, JobStatusUpdate] = {}

        async def follow() -> None:
            async for update in self.updates(pending | set(final)):
                if on_update is not None:
                    result = on_update(update)
                    if asyncio.iscoroutine(result):
                        await result
                if update.phase.finished and update.uid in pending:
                    pending.discard(update.uid)
                    final[update.uid] = update
                    if not pending:
                        return

        async with asyncio.timeout(timeout):
            await follow()
        return final

    async def pod_logs(self, update: JobStatusUpdate) -> dict[str, str]:
        """Logs of a job's pods from the worker that ran it."""
        worker = next((w for w in self.workers if w.cluster == update.cluster), None)
        if worker is None:
            return {}
        run = worker.runs.get(update.uid)
        # A run that left the worker (run_retention): its pods, found by their label.
        names = (
            list(run.pods) if run is not None else await worker.backend.job_pod_names(update.uid)
        )
        logs = {}
        for name in names:
            try:
                logs[name] = await worker.backend.pod_logs(update.uid, name)
            except PodLogsUnavailable as unavailable:
                logs[name] = f"({unavailable})"
        return logs
