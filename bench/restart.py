"""A hub's restart with a long history behind it: time from start to its first new placement.

The topics are laid out as a predecessor leaves them after months: `--finished` jobs that
ended (each with its final status on the status topic, and its record tombstoned on the
state topic once its retention passed) and `--live` jobs still running (a state record each,
with its document), the status group's offset committed at the topic's end, and the heartbeat
of the cluster that runs them, listing them as its worker does. Then a hub starts and a new
job is submitted; the figure is the time from the hub's start to that job's Assigned status,
and the hub's own report of what it read.
Written to bench/results/restart.json.

Usage: python -m bench.restart [--finished N] [--live N] [--bootstrap HOST:PORT]
Without --bootstrap a sandbox broker is started (and stopped) for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.hub_throughput import kafka_bus
from bench.jobs import jax_job
from bus.base import Bus, TopicPartition
from bus.events import publish_event, publish_payload
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from dispatcher.ledger import JobRecord
from dispatcher.state_store import encode_state
from schemas.cluster import ClusterSnapshot, NodeSnapshot
from schemas.events import EventType, JobStatusUpdate, make_event
from schemas.job_parsing import parse_job
from schemas.quantity import parse_quantity
from schemas.status import JobPhase
from trainhub.logs import setup_logging
from trainhub.producer import submit_document

RESULTS = Path(__file__).parent / "results"
_SOURCE = "trainhub/hub"


async def lay_out_history(bus: Bus, topics: Topics, finished: int, live: int) -> list[str]:
    """What a hub that ran for months leaves on the topics; returns the live jobs' uids."""
    await bus.create_topics(topics.shared_specs())
    for i in range(finished):
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"finished-{i}"))
        update = JobStatusUpdate(
            uid=uid,
            name=f"finished-{i}",
            namespace="default",
            kind="JAXJob",
            framework="jax",
            phase=JobPhase.SUCCEEDED,
            cluster="c0",
            attempt=1,
            sequence=5,
            reason="JAXJobSucceeded",
            message="done",
        )
        await publish_payload(
            bus, topics.status, uid, EventType.JOB_STATUS, "worker", update, wait=False
        )
        await bus.send(topics.hub_state, None, key=uid.encode())
        if i % 50_000 == 0:
            await bus.flush()
    uids = []
    for i in range(live):
        document = jax_job(f"live-{i}", 2, "100m", "64Mi")
        record = JobRecord.of(parse_job(document), JobPhase.RUNNING)
        record.cluster, record.attempt, record.sequence = "c0", 1, 3
        await bus.send(topics.hub_state, encode_state(record), key=record.uid.encode())
        uids.append(record.uid)
    await bus.flush()
    return uids


async def worker_heartbeat(bus: Bus, topics: Topics, running: list[str]) -> None:
    """The cluster's heartbeat as its worker reports it: its running jobs listed (their pods
    counted in its nodes' requests), so the starting hub reserves nothing for them again."""
    nodes = [
        NodeSnapshot(
            name=f"n{n}",
            allocatable={"cpu": parse_quantity("10000"), "memory": parse_quantity("100Ti")},
        )
        for n in range(50)
    ]
    snapshot = ClusterSnapshot(
        name="c0", nodes=nodes, observedAt=datetime.now().astimezone(), jobs=running
    )
    event = make_event(EventType.CLUSTER_HEARTBEAT, "bench", snapshot.name, snapshot)
    await publish_event(bus, topics.clusters, snapshot.name, event)


async def commit_status_to_end(bus: Bus, topics: Topics) -> None:
    """The predecessor's committed position: the end of the status topic."""
    subscription = bus.subscribe(
        [topics.status], group=topics.hub_status_group, start_from="latest"
    )
    await subscription.start()
    try:
        while not subscription.assignment():
            await subscription.poll(timeout=0.5)
        await subscription.commit(await _positions(subscription))
    finally:
        await subscription.stop()


async def _positions(subscription: Any) -> dict[TopicPartition, int]:
    """Each assigned partition's position (aiokafka's own: a bench on Kafka only)."""
    consumer = subscription._consumer
    found: dict[TopicPartition, int] = {}
    for tp in consumer.assignment():
        found[TopicPartition(tp.topic, tp.partition)] = await consumer.position(tp)
    return found


async def run(finished: int, live: int, bootstrap: str | None) -> dict[str, Any]:
    async with kafka_bus(bootstrap) as (bus, _):
        topics = Topics(prefix=f"restart-{uuid.uuid4().hex[:6]}")
        started = time.monotonic()
        running = await lay_out_history(bus, topics, finished, live)
        await commit_status_to_end(bus, topics)
        await worker_heartbeat(bus, topics, running)
        laid_out = time.monotonic() - started

        hub = Hub(bus, topics, HubConfig(max_heartbeat_age=3600, lost_after=3600))
        began = time.monotonic()
        await hub.start()
        ready = time.monotonic() - began
        uid = await submit_document(bus, topics, jax_job("after-restart", 2, "100m", "64Mi"))
        while (record := hub.ledger.get(uid)) is None or record.cluster is None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        placed = time.monotonic() - began
        states, statuses = hub.rebuilt_from
        jobs = len(hub.ledger.all())
        await hub.stop()
    return {
        "finished_jobs": finished,
        "live_jobs": live,
        "setup_s": round(laid_out, 1),
        "hub_start_s": round(ready, 2),
        "restart_to_first_placement_s": round(placed, 2),
        "job_states_read": states,
        "status_events_replayed": statuses,
        "jobs_held_after_start": jobs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=10_000)
    parser.add_argument("--bootstrap")
    parser.add_argument("--output", type=Path, default=RESULTS / "restart.json")
    args = parser.parse_args()
    setup_logging()
    result = asyncio.run(run(args.finished, args.live, args.bootstrap))
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
