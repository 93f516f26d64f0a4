"""`sim`: pods take no real resources and end after the time in their annotations."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from bus.aiotasks import TaskOwner
from schemas.sim_annotations import SIM_DURATION, SIM_EXIT_CODE, parse_duration, parse_exit_code
from workers.backends.base import (
    UNSCHEDULABLE_PREFIX,
    Backend,
    Capacity,
    PodObservation,
    PodPhase,
)
from workers.backends.crash_backoff import CrashBackoff
from workers.backends.node_pool import NodePool
from workers.rendering import PodPlan, ServicePlan

DEFAULT_DURATION = 1.0


def _why_unschedulable(pool: NodePool, pod: PodPlan) -> str:
    """kube-scheduler's wording: how many nodes fit, and what stopped the others."""
    selector = dict(pod.spec.nodeSelector or {})
    reasons: Counter[str] = Counter()
    for node in pool.nodes:
        if any(node.labels.get(k) != v for k, v in selector.items()):
            reasons["node(s) didn't match Pod's node affinity/selector"] += 1
            continue
        if not pod.host_ports.isdisjoint(node.held_ports()):
            reasons["node(s) didn't have free ports for the requested pod ports"] += 1
            continue
        used = node.requested()
        needs = {**pod.requests, "pods": Decimal(1)} if "pods" in node.allocatable else pod.requests
        for resource, amount in needs.items():
            if amount > 0 and used.get(resource, Decimal(0)) + amount > node.allocatable.get(
                resource, Decimal(0)
            ):
                reasons[f"Insufficient {resource}"] += 1
    detail = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
    return f"0/{len(pool.nodes)} nodes are available: {detail}."


@dataclass
class _SimPod:
    job_uid: str
    plan: PodPlan
    phase: PodPhase = "Pending"
    node: str | None = None
    unschedulable: str | None = None
    delay: float = 0.0
    """Seconds it waits on its node before it runs (crash backoff)."""
    log: str = ""
    """What the pod "printed": a line per phase it reached, appended as a container's output
    is (a follower reads on from where it was)."""


class SimBackend(Backend):
    kind = "sim"

    def __init__(
        self, pool: NodePool, *, time_scale: float = 1.0, logs_dir: Path | None = None
    ) -> None:
        """`logs_dir`: also keep what each pod "printed" in `<namespace>_<pod>.log` there."""
        super().__init__()
        self.pool = pool
        self.time_scale = time_scale
        self.logs_dir = logs_dir
        self._pods: dict[str, _SimPod] = {}
        self._services: dict[str, str] = {}
        self._tasks = TaskOwner("sim")
        self.backoff = CrashBackoff()

    async def close(self) -> None:
        await self._tasks.cancel_all()

    async def create_service(self, job_uid: str, service: ServicePlan) -> None:
        self._services[f"{service.namespace}/{service.name}"] = job_uid

    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        key = f"{pod.namespace}/{pod.name}"
        if key in self._pods:
            return
        self._pods[key] = _SimPod(job_uid, pod, delay=self.backoff.delay(key))
        await self._emit(self._pods[key])
        self._bind_pending()

    def _bind_pending(self) -> None:
        for key, pod in self._pods.items():
            if pod.phase != "Pending" or pod.node is not None:
                continue
            selector = dict(pod.plan.spec.nodeSelector or {})
            node = self.pool.bind(key, pod.plan.requests, selector, pod.plan.host_ports)
            if node is not None:
                pod.node = node
                pod.unschedulable = None
                self._tasks.spawn(self._run(key, pod), key)
                continue
            message = f"{UNSCHEDULABLE_PREFIX} {_why_unschedulable(self.pool, pod.plan)}"
            if message != pod.unschedulable:
                # Like kube-scheduler's PodScheduled=False condition, once per new message.
                pod.unschedulable = message
                self.observations.put_nowait(
                    PodObservation(pod.job_uid, pod.plan.name, "Pending", message=message)
                )

    async def _run(self, key: str, pod: _SimPod) -> None:
        if pod.delay:  # crash backoff: bound to its node, not running yet
            await asyncio.sleep(pod.delay * self.time_scale)
        if self._pods.get(key) is not pod:
            return  # deleted before it started
        pod.phase = "Running"
        await self._print(pod, f"[sim] {pod.plan.name} is Running\n")
        await self._emit(pod)
        annotations = pod.plan.annotations
        duration = parse_duration(annotations.get(SIM_DURATION, str(DEFAULT_DURATION)))
        exit_code = parse_exit_code(annotations.get(SIM_EXIT_CODE, "0"))
        await asyncio.sleep(duration * self.time_scale)
        if self._pods.get(key) is not pod:
            return
        pod.phase = "Succeeded" if exit_code == 0 else "Failed"
        await self._print(pod, f"[sim] {pod.plan.name} is {pod.phase} (exit code {exit_code})\n")
        self.pool.unbind(key)
        await self._emit(pod, exit_code)
        self._bind_pending()

    async def _print(self, pod: _SimPod, line: str) -> None:
        pod.log += line
        if self.logs_dir is not None:
            path = self.logs_dir / f"{pod.plan.namespace}_{pod.plan.name}.log"
            await asyncio.to_thread(_append, path, line)

    async def _emit(self, pod: _SimPod, exit_code: int | None = None) -> None:
        await self.observations.put(
            PodObservation(pod.job_uid, pod.plan.name, pod.phase, exit_code, node=pod.node)
        )

    async def delete_pod(self, job_uid: str, name: str, namespace: str) -> None:
        key = f"{namespace}/{name}"
        if self._pods.pop(key, None) is not None:
            self.pool.unbind(key)
            self._bind_pending()
        self._services.pop(key, None)

    async def delete_job(self, job_uid: str, namespace: str | None = None) -> None:
        for key in [k for k, p in self._pods.items() if p.job_uid == job_uid]:
            namespace, name = key.split("/", 1)
            await self.delete_pod(job_uid, name, namespace)
            self.backoff.forget(key)
        for key in [k for k, uid in self._services.items() if uid == job_uid]:
            del self._services[key]

    async def capacity(self) -> Capacity:
        jobs = {p.job_uid for p in self._pods.values() if p.node and p.phase == "Running"}
        return Capacity(self.pool.snapshots(), jobs)

    async def job_uids(self) -> set[str]:
        return {p.job_uid for p in self._pods.values()}

    async def pod_logs(self, job_uid: str, name: str) -> str:
        pod = next((p for p in self._pods.values() if p.plan.name == name), None)
        return "" if pod is None else pod.log


def _append(path: Path, line: str) -> None:
    """A pod's log file grows as a container's output does (a pod made again appends)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        log.write(line)
