"""`sim`: pods take no real resources and end after the time in their annotations."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from bus.aiotasks import TaskOwner
from schemas.events import ListedPod
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
    started: datetime | None = None
    """When it began to run on its node."""
    unschedulable: str | None = None
    delay: float = 0.0
    """Seconds it waits on its node before it runs (crash backoff)."""
    log: str = ""
    """What the pod "printed": a line per phase it reached, appended as a container's output
    is (a follower reads on from where it was)."""

    @property
    def ended(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def listed(self) -> ListedPod:
        waiting = self.unschedulable
        return ListedPod(
            name=self.plan.name,
            namespace=self.plan.namespace,
            phase=self.phase,
            node_name=self.node,
            start_time=self.started,
            reason="Unschedulable" if waiting else None,
            message=waiting.removeprefix(UNSCHEDULABLE_PREFIX).strip() if waiting else None,
        )


@dataclass
class _SimJob:
    """One job's objects, so that no call on a job walks every other job's."""

    pods: set[str] = field(default_factory=set)
    services: set[str] = field(default_factory=set)
    forgotten: bool = False
    """Its run left the worker: each pod goes once it ended (see `forget_job`)."""


class SimBackend(Backend):
    """Pods are kept by job: pending ones (waiting for a node) and running ones apart, so a
    pod's creation or end costs the same however many pods came before. An ended pod stays,
    its log readable, until its job is deleted or the worker forgets the finished job (its
    run's retention): then it goes, as a real cluster's garbage collector would take it."""

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
        self._jobs: dict[str, _SimJob] = {}
        self._pending: dict[str, _SimPod] = {}
        """Pods waiting for a node, in the order they were created."""
        self._running: dict[str, _SimPod] = {}
        self._services: dict[str, str] = {}
        self._tasks = TaskOwner("sim")
        self.backoff = CrashBackoff()

    async def close(self) -> None:
        await self._tasks.cancel_all()

    def _job(self, job_uid: str) -> _SimJob:
        return self._jobs.setdefault(job_uid, _SimJob())

    def _drop_from_job(self, job_uid: str, key: str) -> None:
        job = self._jobs.get(job_uid)
        if job is None:
            return
        job.pods.discard(key)
        job.services.discard(key)
        self._settle(job_uid, job)

    def _settle(self, job_uid: str, job: _SimJob) -> None:
        """A job without pods goes, with its services once the worker forgot it."""
        if job.pods or (job.services and not job.forgotten):
            return
        for key in job.services:
            self._services.pop(key, None)
        del self._jobs[job_uid]

    async def create_service(self, job_uid: str, service: ServicePlan) -> None:
        key = f"{service.namespace}/{service.name}"
        self._services[key] = job_uid
        self._job(job_uid).services.add(key)

    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        key = f"{pod.namespace}/{pod.name}"
        if key in self._pods:
            return
        sim_pod = _SimPod(job_uid, pod, delay=self.backoff.delay(key))
        self._pods[key] = self._pending[key] = sim_pod
        job = self._job(job_uid)
        job.pods.add(key)
        job.forgotten = False
        await self._emit(sim_pod)
        self._bind_pending()

    def _bind_pending(self) -> None:
        for key, pod in list(self._pending.items()):
            selector = dict(pod.plan.spec.nodeSelector or {})
            node = self.pool.bind(key, pod.plan.requests, selector, pod.plan.host_ports)
            if node is not None:
                del self._pending[key]
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
        pod.phase, pod.started = "Running", datetime.now(UTC)
        self._running[key] = pod
        await self._print(pod, f"[sim] {pod.plan.name} is Running\n")
        await self._emit(pod)
        annotations = pod.plan.annotations
        duration = parse_duration(annotations.get(SIM_DURATION, str(DEFAULT_DURATION)))
        exit_code = parse_exit_code(annotations.get(SIM_EXIT_CODE, "0"))
        await asyncio.sleep(duration * self.time_scale)
        if self._pods.get(key) is not pod:
            return
        pod.phase = "Succeeded" if exit_code == 0 else "Failed"
        self._running.pop(key, None)
        await self._print(pod, f"[sim] {pod.plan.name} is {pod.phase} (exit code {exit_code})\n")
        self.pool.unbind(key)
        await self._emit(pod, exit_code)
        job = self._jobs.get(pod.job_uid)
        if job is not None and job.forgotten:
            self._remove(key, pod)
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

    def _remove(self, key: str, pod: _SimPod) -> None:
        """The pod and its service go (an ended pod holds no node any more)."""
        del self._pods[key]
        self._pending.pop(key, None)
        self._running.pop(key, None)
        self._services.pop(key, None)
        self.backoff.forget(key)
        self._drop_from_job(pod.job_uid, key)

    async def delete_pod(self, job_uid: str, name: str, namespace: str) -> None:
        key = f"{namespace}/{name}"
        pod = self._pods.pop(key, None)
        if pod is not None:
            self._pending.pop(key, None)
            self._running.pop(key, None)
            self._drop_from_job(pod.job_uid, key)
            self.pool.unbind(key)
            self._bind_pending()
        owner = self._services.pop(key, None)
        if owner is not None:
            self._drop_from_job(owner, key)

    async def delete_job(self, job_uid: str, namespace: str | None = None) -> None:
        job = self._jobs.get(job_uid)
        if job is None:
            return
        for key in sorted(job.pods):
            namespace, name = key.split("/", 1)
            await self.delete_pod(job_uid, name, namespace)
            self.backoff.forget(key)
        for key in sorted(job.services):
            self._services.pop(key, None)
        self._jobs.pop(job_uid, None)

    def forget_job(self, job_uid: str) -> None:
        """Ended pods go now, those still running once they end; the job's services with
        its last pod. A pod listing or log request for the job finds none from then on."""
        job = self._jobs.get(job_uid)
        if job is None:
            return
        job.forgotten = True
        for key in sorted(job.pods):
            pod = self._pods[key]
            if pod.ended:
                self._remove(key, pod)
        if self._jobs.get(job_uid) is job:
            self._settle(job_uid, job)

    async def capacity(self) -> Capacity:
        jobs = {p.job_uid for p in self._running.values() if p.node}
        return Capacity(self.pool.snapshots(), jobs)

    async def job_uids(self) -> set[str]:
        return {uid for uid, job in self._jobs.items() if job.pods}

    async def job_pod_names(self, job_uid: str) -> list[str]:
        job = self._jobs.get(job_uid)
        return sorted(self._pods[key].plan.name for key in job.pods) if job else []

    async def job_pods(self, job_uid: str) -> list[ListedPod]:
        job = self._jobs.get(job_uid)
        pods = [self._pods[key] for key in job.pods] if job else []
        return sorted((pod.listed() for pod in pods), key=lambda listed: listed.name)

    async def pod_logs(self, job_uid: str, name: str) -> str:
        job = self._jobs.get(job_uid)
        keys = job.pods if job is not None else ()
        pod = next((self._pods[k] for k in keys if self._pods[k].plan.name == name), None)
        return "" if pod is None else pod.log


def _append(path: Path, line: str) -> None:
    """A pod's log file grows as a container's output does (a pod made again appends)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        log.write(line)
