"""What the multi-cluster tests on Kafka share: a hub and kube workers on one KafkaBus, a
follower of the status topic that keeps every update with its event time, and the pods of a
job as each cluster's admin sees them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry

from bus.aiotasks import TaskOwner
from bus.base import Bus, Subscription
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.cluster import ClusterSnapshot
from schemas.codec import decode_event
from schemas.errors import EventDecodeError
from schemas.events import EventType, JobStatusUpdate
from schemas.status import JobPhase
from tests.kube.sandbox_access import admin_request, job_objects, worker_backend
from trainhub.sandbox.kube_cluster import KubeSandbox, MemberCluster
from workers.worker import Worker, WorkerConfig


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
        subscription = self.bus.subscribe([self.topics.status], group=None, start_from="earliest")
        await subscription.start()
        self._tasks.spawn(self._follow(subscription), "follow")

    async def stop(self) -> None:
        await self._tasks.cancel_all()

    async def _follow(self, subscription: Subscription) -> None:
        try:
            while True:
                for record in await subscription.poll(timeout=0.2):
                    try:
                        event = decode_event(record.headers, record.value)
                    except EventDecodeError:
                        continue
                    if event.type != EventType.JOB_STATUS:
                        continue
                    update = event.data_as(JobStatusUpdate)
                    self.updates.setdefault(update.uid, []).append(Seen(event.time, update))
                    self._arrived.set()
        finally:
            await subscription.stop()

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
class Fleet:
    """A hub and one kube worker per cluster in this process, meeting on a real broker."""

    bus: KafkaBus
    topics: Topics
    hub: Hub
    workers: dict[str, Worker]
    status: StatusLog
    sandbox: KubeSandbox

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
) -> AsyncIterator[Fleet]:
    """Start the hub and the workers of `workers` (default: every cluster), each worker with
    its cluster's least-privilege kubeconfig and context. Without `advertise_namespaces` a
    worker's heartbeats name no namespaces, so the hub sends it jobs of any namespace; without
    `limit_namespaces` its backend has no namespace allow-list either (as `trainhub worker`
    without `--namespace`)."""
    bus, registry = KafkaBus(settings), CollectorRegistry()
    hub = Hub(bus, topics, hub_config(), registry=registry)
    names = list(workers) if workers is not None else list(sandbox.clusters)
    created: dict[str, Worker] = {}
    for name in names:
        cluster = sandbox.clusters[name]
        namespaces = list(cluster.worker_namespaces) if advertise_namespaces else None
        backend = worker_backend(cluster)
        if not limit_namespaces:
            backend.namespaces = None
        config = WorkerConfig(cluster=name, heartbeat_interval=0.5, namespaces=namespaces)
        created[name] = Worker(bus, backend, config, topics, registry=registry)
    status = StatusLog(bus, topics)
    await bus.start()
    started: list[Worker] = []
    try:
        await hub.start()
        await status.start()
        for worker in created.values():
            try:
                await worker.start()
            except BaseException:
                await worker.backend.close()
                raise
            started.append(worker)
        fleet = Fleet(bus, topics, hub, created, status, sandbox)
        await fleet.wait_registered(names)
        yield fleet
    finally:
        await status.stop()
        for worker in started:
            await worker.stop()
        await hub.stop()
        await bus.close()


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
