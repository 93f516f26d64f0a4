"""Standby hubs in one process on the in-memory bus: the first to join leads, a standby
takes over at a newer epoch when the leader leaves, and what a former leader sends after the
new leader's mark is refused by workers and status readers (bus/epochs.py)."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from bus.events import publish_payload
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import HubConfig
from dispatcher.leadership import LeadingHub
from dispatcher.outbox import mark_epoch
from schemas.events import EventType, JobAssigned, JobStatusUpdate
from schemas.job_parsing import parse_job
from schemas.status import JobPhase
from tests.helpers import jax_job, until
from trainhub.producer import follow_status, submit_document
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.worker import Worker, WorkerConfig


def _hub(bus: MemoryBus, topics: Topics, name: str) -> LeadingHub:
    return LeadingHub(
        bus, topics, HubConfig(schedule_interval=0.05), CollectorRegistry(), instance=name
    )


async def test_a_standby_leads_at_a_newer_epoch_once_the_leader_is_gone() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="standby")
    first, second = _hub(bus, topics, "first"), _hub(bus, topics, "second")
    await first.start()
    await asyncio.wait_for(first.leading.wait(), 5)
    await second.start()
    worker = Worker(
        bus,
        SimBackend(parse_cluster_spec("east:cpu=8,memory=16Gi").pool()),
        WorkerConfig(cluster="east", heartbeat_interval=0.2),
        topics,
    )
    await worker.start()
    try:
        before = await submit_document(bus, topics, jax_job("before", workers=1))
        await until(lambda: worker.runs.get(before) is not None)
        await asyncio.sleep(0.3)
        assert not second.leading.is_set()  # standing by while the first leads
        first_epoch = first.leadership.epoch
        await first.stop()
        await asyncio.wait_for(second.leading.wait(), 5)
        assert second.leadership.epoch is not None and first_epoch is not None
        assert second.leadership.epoch > first_epoch
        assert second.hub is not None
        # The new leader knows the job the first placed, and places new ones.
        assert second.hub.ledger.get(before) is not None
        after = await submit_document(bus, topics, jax_job("after", workers=1))
        await until(lambda: worker.runs.get(after) is not None)
    finally:
        await worker.stop()
        await second.stop()
        await first.stop()


async def test_a_former_leader_is_neither_acted_on_nor_believed() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="zombie")
    await bus.create_topics([*topics.shared_specs(), topics.assignment_spec("east")])
    worker = Worker(
        bus,
        SimBackend(parse_cluster_spec("east:cpu=8,memory=16Gi").pool()),
        WorkerConfig(cluster="east", heartbeat_interval=0.2),
        topics,
    )
    await worker.start()
    follower = follow_status(bus, topics)
    try:
        config = HubConfig()
        # A new leader at epoch 2 marks the topics; the old one (epoch 1) still sends.
        await mark_epoch(bus, topics.assignments("east"), config.source, 2)
        await mark_epoch(bus, topics.status, config.source, 2)
        job = parse_job(jax_job("zombie", workers=1))

        async def assign(name: str, epoch: int) -> str:
            document = jax_job(name, workers=1)
            uid = parse_job(document).uid
            assigned = JobAssigned(uid=uid, cluster="east", attempt=1, job=document)
            await publish_payload(
                bus,
                topics.assignments("east"),
                uid,
                EventType.JOB_ASSIGNED,
                config.source,
                assigned,
                epoch=epoch,
            )
            return uid

        stale = await assign("from-the-old-leader", 1)
        current = await assign("from-the-new-leader", 2)
        await until(lambda: current in worker.runs)
        await asyncio.sleep(0.3)
        assert stale not in worker.runs

        for epoch, message in ((1, "forged by the old leader"), (2, "from the leader")):
            update = JobStatusUpdate(
                uid=job.uid, phase=JobPhase.QUEUED, reason="Queued", message=message
            )
            await publish_payload(
                bus,
                topics.status,
                job.uid,
                EventType.JOB_STATUS,
                config.source,
                update,
                epoch=epoch,
            )

        async def first_status() -> JobStatusUpdate:
            async for update in follower:
                if update.uid == job.uid:
                    return update
            raise AssertionError("the status topic ended")

        seen = await asyncio.wait_for(first_status(), 5)
        assert seen.message == "from the leader"
    finally:
        await follower.aclose()  # type: ignore[attr-defined]
        await worker.stop()
