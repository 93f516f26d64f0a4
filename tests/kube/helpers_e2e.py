"""What the multi-cluster tests on Kafka share: a hub and kube workers on one KafkaBus,
followers of the status and clusters topics that keep every update and heartbeat as it
arrives, a `trainhub worker` process restarted like a Deployment's pod, and the pods of a job
as each cluster's admin sees them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bus.aiotasks import TaskOwner
from bus.base import Bus
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.cluster import ClusterSnapshot
from schemas.codec import decode_event
from schemas.errors import EventDecodeError
from schemas.events import CloudEvent, EventType, JobStatusUpdate
from schemas.status import JobPhase
from tests.kafka.processes import Process
from tests.kube.sandbox_access import admin_request, job_objects, worker_backend
from trainhub_sandbox.kube_cluster import KubeSandbox, MemberCluster
from workers.worker import Worker, WorkerConfig


async def follow(
    bus: Bus, topic: str, event_type: str, take: Callable[[CloudEvent], None], tasks: TaskOwner
) -> None:
    """Hand every `event_type` event of `topic`, from its start, to `take` as it arrives, in a
    task of `tasks` (undecodable records are passed over)."""
    subscription = bus.subscribe([topic], group=None, start_from="earliest")
    await subscription.start()

    async def run() -> None:
        try:
            while True:
                for record in await subscription.poll(timeout=0.2):
                    try:
                        event = decode_event(record.headers, record.value)
                    except EventDecodeError:
                        continue
                    if event.type == event_type:
                        take(event)
        finally:
            await subscription.stop()

    tasks.spawn(run(), "follow")


@dataclass(frozen=True)
class Seen:
    """One status update and the time its event says it was made."""

    time: datetime
    update: JobStatusUpdate


@dataclass
class StatusLog:
    """Every job status update on the status topic, from its start, as it arrives."""

    bus: Bus
    topics: Topics
    updates: dict[str, list[Seen]] = field(default_factory=dict)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: TaskOwner = field(default_factory=lambda: TaskOwner("status-log"))

    async def start(self) -> None:
        await follow(self.bus, self.topics.status, EventType.JOB_STATUS, self._take, self._tasks)

    async def stop(self) -> None:
        await self._tasks.cancel_all()

    def _take(self, event: CloudEvent) -> None:
        update = event.data_as(JobStatusUpdate)
        self.updates.setdefault(update.uid, []).append(Seen(event.time, update))
        self._arrived.set()

    def history(self, uid: str) -> list[JobStatusUpdate]:
        return [seen.update for seen in self.updates.get(uid, [])]

    def phases(self, uid: str) -> list[JobPhase]:
        return [update.phase for update in self.history(uid)]

    def last(self, uid: str) -> JobStatusUpdate:
        return self.history(uid)[-1]

    def first(self, uid: str, check: Callable[[JobStatusUpdate], bool]) -> Seen:
        return next(seen for seen in self.updates.get(uid, []) if check(seen.update))

    def finished(self, uid: str) -> bool:
        history = self.history(uid)
        return bool(history) and history[-1].phase.finished

    async def wait(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        """Until `check()` holds; on timeout, fail showing every job's phases."""
        try:
            async with asyncio.timeout(timeout):
                while not check():
                    self._arrived.clear()
                    try:
                        await asyncio.wait_for(self._arrived.wait(), 0.5)
                    except TimeoutError:
                        pass
        except TimeoutError:
            raise AssertionError(f"gave up after {timeout}s waiting for {what}: {self}") from None

    async def wait_finished(self, uids: Iterable[str], timeout: float) -> None:
        wanted = list(uids)
        await self.wait(lambda: all(self.finished(u) for u in wanted), timeout, "jobs to finish")

    def __str__(self) -> str:
        return "; ".join(
            f"{uid}: " + " ".join(f"{u.phase.value}({u.reason}@{u.cluster})" for u in history)
            for uid, history in ((uid, self.history(uid)) for uid in self.updates)
        )


@dataclass
class HeartbeatLog:
    """Every cluster heartbeat on the clusters topic, from its start, as it arrives."""

    bus: Bus
    topics: Topics
    snapshots: dict[str, list[ClusterSnapshot]] = field(default_factory=dict)
    _tasks: TaskOwner = field(default_factory=lambda: TaskOwner("heartbeat-log"))

    async def start(self) -> None:
        await follow(
            self.bus, self.topics.clusters, EventType.CLUSTER_HEARTBEAT, self._take, self._tasks
        )

    async def stop(self) -> None:
        await self._tasks.cancel_all()

    def _take(self, event: CloudEvent) -> None:
        snapshot = ClusterSnapshot.model_validate(event.data)
        if snapshot.observedAt is None:
            snapshot = snapshot.model_copy(update={"observedAt": event.time})
        self.snapshots.setdefault(snapshot.name, []).append(snapshot)

    def of(self, cluster: str, *, after: datetime | None = None) -> list[ClusterSnapshot]:
        """The cluster's heartbeats in arrival order, only those read after `after` if given."""
        return [
            snapshot
            for snapshot in self.snapshots.get(cluster, [])
            if after is None or (snapshot.observedAt is not None and snapshot.observedAt > after)
        ]


@dataclass
class Fleet:
    """A hub and kube workers in this process, meeting on a real broker."""

    bus: KafkaBus
    topics: Topics
    hub: Hub
    workers: dict[str, Worker]
    status: StatusLog
    sandbox: KubeSandbox
    heartbeats: HeartbeatLog
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    started: list[Worker] = field(default_factory=list)
    """The workers started so far, which the fleet stops on its way out."""

    async def start_worker(
        self,
        name: str,
        *,
        advertise_namespaces: bool = True,
        limit_namespaces: bool = True,
        heartbeat_interval: float = 0.5,
    ) -> Worker:
        """Start a kube worker for cluster `name` with its least-privilege identity (see
        `running_fleet` for the namespace switches)."""
        cluster = self.sandbox.clusters[name]
        namespaces = list(cluster.worker_namespaces) if advertise_namespaces else None
        backend = worker_backend(cluster)
        if not limit_namespaces:
            backend.namespaces = None
        config = WorkerConfig(
            cluster=name, heartbeat_interval=heartbeat_interval, namespaces=namespaces
        )
        worker = Worker(self.bus, backend, config, self.topics, registry=self.registry)
        try:
            await worker.start()
        except BaseException:
            await worker.backend.close()
            raise
        self.workers[name] = worker
        self.started.append(worker)
        return worker

    def snapshot(self, name: str) -> ClusterSnapshot | None:
        """The hub's newest heartbeat of a cluster."""
        return self.hub.clusters.get(name)

    def cluster(self, name: str | None) -> MemberCluster:
        assert name is not None, "the job has no cluster"
        return self.sandbox.clusters[name]

    async def wait_registered(self, names: Iterable[str], timeout: float = 30.0) -> None:
        """Until the hub has a heartbeat from each cluster (so it knows every candidate)."""
        wanted = set(names)
        async with asyncio.timeout(timeout):
            while True:
                if wanted <= {snapshot.name for snapshot in self.hub.clusters.all()}:
                    return
                await asyncio.sleep(0.1)

    async def cleanup(self, uids: Iterable[str]) -> None:
        """Delete the jobs' objects in every cluster (as admin: no worker may be left)."""
        for uid in uids:
            for cluster in self.sandbox.clusters.values():
                for resource in ("pods", "services"):
                    for obj in await job_objects(cluster, resource, uid):
                        await delete_object(cluster, resource, obj)


def hub_config() -> HubConfig:
    return HubConfig(max_heartbeat_age=15, lost_after=30, schedule_interval=0.5)


@asynccontextmanager
async def running_fleet(
    settings: KafkaSettings,
    topics: Topics,
    sandbox: KubeSandbox,
    *,
    workers: Iterable[str] | None = None,
    advertise_namespaces: bool = True,
    limit_namespaces: bool = True,
    config: HubConfig | None = None,
) -> AsyncIterator[Fleet]:
    """Start the hub (with `config`, default `hub_config()`) and the workers of `workers`
    (default: every cluster), each worker with its cluster's least-privilege kubeconfig and
    context. Without `advertise_namespaces` a worker's heartbeats name no namespaces, so the
    hub sends it jobs of any namespace; without `limit_namespaces` its backend has no
    namespace allow-list either (as `trainhub worker` without `--namespace`)."""
    bus, registry = KafkaBus(settings), CollectorRegistry()
    hub = Hub(bus, topics, config or hub_config(), registry=registry)
    names = list(workers) if workers is not None else list(sandbox.clusters)
    status, heartbeats = StatusLog(bus, topics), HeartbeatLog(bus, topics)
    fleet = Fleet(bus, topics, hub, {}, status, sandbox, heartbeats, registry)
    await bus.start()
    try:
        await hub.start()
        await status.start()
        await heartbeats.start()
        for name in names:
            await fleet.start_worker(
                name,
                advertise_namespaces=advertise_namespaces,
                limit_namespaces=limit_namespaces,
            )
        await fleet.wait_registered(names)
        yield fleet
    finally:
        await status.stop()
        await heartbeats.stop()
        for worker in fleet.started:
            await worker.stop()
        await hub.stop()
        await bus.close()


class SupervisedWorker:
    """`trainhub worker --backend kube` for one cluster as an OS process that is started again
    whenever it exits, as the pod of its Deployment would be; `kill()` takes it down with
    SIGKILL and keeps it down until `release()`."""

    def __init__(
        self,
        cluster: MemberCluster,
        settings: KafkaSettings,
        topics: Topics,
        logs: Path,
        *,
        heartbeat_interval: float = 0.5,
        restart_delay: float = 1.0,
    ) -> None:
        self.cluster = cluster
        self.args = [
            "-v",  # INFO: what the worker did shows in its log when a test fails
            "worker",
            "--backend",
            "kube",
            "--cluster",
            cluster.name,
            "--kubeconfig",
            str(cluster.worker_kubeconfig),
            "--context",
            cluster.worker_context,
            "--bootstrap",
            settings.bootstrap,
            "--topic-prefix",
            topics.prefix,
            "--heartbeat-interval",
            str(heartbeat_interval),
            *(arg for ns in cluster.worker_namespaces for arg in ("--namespace", ns)),
        ]
        self.logs = logs
        self.restart_delay = restart_delay
        self.processes: list[Process] = []
        self.exits: list[int] = []
        """Exit codes of the processes that ended on their own or by `kill()`, in order."""
        self._up = asyncio.Event()
        self._up.set()
        self._exited = asyncio.Event()
        self._tasks = TaskOwner(f"supervisor-{cluster.name}")

    @property
    def current(self) -> Process:
        return self.processes[-1]

    def _spawn(self) -> None:
        name = f"worker-{self.cluster.name}-{len(self.processes) + 1}"
        self.processes.append(Process(name, self.args, self.logs))

    async def start(self) -> None:
        self._spawn()
        self._tasks.spawn(self._supervise(), "restart")

    async def _supervise(self) -> None:
        while True:
            process = self.current
            code = await asyncio.to_thread(process.popen.wait)
            process.terminate()  # closes its log
            self.exits.append(code)
            self._exited.set()
            await self._up.wait()
            await asyncio.sleep(self.restart_delay)
            self._spawn()

    async def wait_exits(self, count: int, timeout: float) -> None:
        """Until `count` processes have ended; on timeout, fail showing the logs' end."""
        try:
            async with asyncio.timeout(timeout):
                while len(self.exits) < count:
                    self._exited.clear()
                    await self._exited.wait()
        except TimeoutError:
            raise AssertionError(
                f"the worker of {self.cluster.name} did not exit {count} time(s) within "
                f"{timeout}s (exits: {self.exits})\n{self.log()[-3000:]}"
            ) from None

    def kill(self) -> None:
        """SIGKILL the running process; no restart until `release()`."""
        self._up.clear()
        self.current.kill()

    def release(self) -> None:
        self._up.set()

    async def stop(self) -> int | None:
        """Stop supervising and SIGTERM the running process; its exit code (None when no
        process was running)."""
        await self._tasks.cancel_all()
        if not self.processes or self.current.popen.poll() is not None:
            return None
        return await asyncio.to_thread(self.current.terminate)

    def log(self) -> str:
        return "".join(f"--- {p.name} ---\n{p.log()}" for p in self.processes)


async def delete_object(cluster: MemberCluster, resource: str, obj: dict[str, Any]) -> None:
    metadata = obj["metadata"]
    path = f"/api/v1/namespaces/{metadata['namespace']}/{resource}/{metadata['name']}"
    if resource == "pods":
        path += "?gracePeriodSeconds=0"
    status, reply = await admin_request(cluster, "DELETE", path)
    assert status in (200, 202, 404), reply


async def pods_of(
    cluster: MemberCluster, uid: str, namespace: str = "default"
) -> list[dict[str, Any]]:
    return await job_objects(cluster, "pods", uid, namespace)


async def node_labels(cluster: MemberCluster, node: str) -> dict[str, str]:
    status, reply = await admin_request(cluster, "GET", f"/api/v1/nodes/{node}")
    assert status == 200, reply
    return dict(reply["metadata"].get("labels") or {})
