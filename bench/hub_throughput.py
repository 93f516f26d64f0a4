"""Jobs through the hub on a real Kafka broker (and on the in-memory bus, for the ratio).

Two measurements, written to bench/results/kafka.json:
- throughput: N jobs already on the jobs topic, the hub started, time until all are Assigned
  (the hub's start included; its own share reported as `hub_start_s`);
- latency: jobs offered at a fixed rate while the hub runs; submit -> Assigned percentiles,
  from the CloudEvent times of each job's submission and of its Assigned status.

Usage: python -m bench.hub_throughput [--jobs N] [--rate R] [--bootstrap HOST:PORT]
Without --bootstrap a sandbox broker is started (and stopped) for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.jobs import jax_job
from bus.base import Bus
from bus.events import publish_event
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.cluster import ClusterSnapshot, NodeSnapshot
from schemas.codec import decode_event
from schemas.events import EventType, JobStatusUpdate, JobSubmitted, make_event
from schemas.job_parsing import job_uid_of
from schemas.quantity import parse_quantity
from schemas.status import JobPhase
from trainhub.logs import setup_logging
from trainhub.processes import tune_gc
from trainhub.producer import submit_document

RESULTS = Path(__file__).parent / "results"


def job(i: int, run: str) -> dict[str, Any]:
    return jax_job(f"bench-{run}-{i}", 2, "100m", "64Mi")


async def heartbeat(bus: Bus, topics: Topics, clusters: int = 4) -> None:
    """Big simulated clusters (no workers needed: the hub only places)."""
    for c in range(clusters):
        nodes = [
            NodeSnapshot(
                name=f"n{n}",
                allocatable={"cpu": parse_quantity("10000"), "memory": parse_quantity("100Ti")},
            )
            for n in range(50)
        ]
        snapshot = ClusterSnapshot(
            name=f"c{c}", nodes=nodes, observedAt=datetime.now().astimezone()
        )
        event = make_event(EventType.CLUSTER_HEARTBEAT, "bench", snapshot.name, snapshot)
        await publish_event(bus, topics.clusters, snapshot.name, event)


async def assigned_times(bus: Bus, topics: Topics) -> dict[str, float]:
    subscription = bus.subscribe([topics.status], group=None)
    await subscription.start()
    found: dict[str, float] = {}
    try:
        while True:
            for record in await subscription.poll(timeout=0.5, max_records=10_000):
                event = decode_event(record.headers, record.value)
                update = event.data_as(JobStatusUpdate)
                if update.phase == JobPhase.ASSIGNED:
                    found[update.uid] = event.time.timestamp()
            if await subscription.lag() == 0:
                return found
    finally:
        await subscription.stop()


async def _until_placed(hub: Hub, count: int) -> None:
    """Poll the hub's ledger (cheap, in-process) until `count` jobs are assigned."""
    while len(hub.ledger.in_phase(JobPhase.ASSIGNED)) < count:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


async def throughput(bus: Bus, jobs: int) -> dict[str, float]:
    topics = Topics(prefix=f"bench{uuid.uuid4().hex[:8]}")
    await bus.create_topics(topics.shared_specs())
    await heartbeat(bus, topics)
    run = uuid.uuid4().hex[:6]
    for i in range(jobs):
        await submit_document_nowait(bus, topics, job(i, run))
    await bus.flush()
    hub = Hub(bus, topics, HubConfig(max_heartbeat_age=3600, lost_after=3600))
    started = time.perf_counter()
    await hub.start()
    start_seconds = time.perf_counter() - started
    tune_gc()  # as `trainhub hub` does
    await _until_placed(hub, jobs)
    elapsed = time.perf_counter() - started
    await hub.stop()
    # The rate counts the hub's start (joining its group, replaying the empty state topics)
    # too: how long `hub_start_s` of it took is reported beside it.
    return {
        "jobs": jobs,
        "seconds": round(elapsed, 3),
        "jobs_per_s": round(jobs / elapsed, 1),
        "hub_start_s": round(start_seconds, 3),
    }


async def submit_document_nowait(bus: Bus, topics: Topics, document: dict[str, Any]) -> float:
    """Queue the submission without waiting for the broker's ack (as a fleet of producers
    offers load: none waits for another's ack); returns the submission's CloudEvent time."""
    uid = job_uid_of(document) or ""
    event = make_event(EventType.JOB_SUBMITTED, "bench", uid, JobSubmitted(job=document))
    await publish_event(bus, topics.jobs, uid, event, wait=False)
    return event.time.timestamp()


async def latency(
    bus: Bus, rate: float, seconds: float, bootstrap: str | None = None
) -> dict[str, float]:
    """With `bootstrap` (Kafka), the jobs come from a producer process of their own
    (`bench.offer_jobs`), as they would in production; on the in-memory bus they can only
    come from this process, which the hub then shares its CPU with."""
    topics = Topics(prefix=f"bench{uuid.uuid4().hex[:8]}")
    await bus.create_topics(topics.shared_specs())
    await heartbeat(bus, topics)
    hub = Hub(bus, topics, HubConfig(max_heartbeat_age=3600, lost_after=3600))
    await hub.start()
    tune_gc()  # as `trainhub hub` does
    # The cluster's assignments topic is created on the first placement: not part of what a
    # running hub's latency is.
    await submit_document(bus, topics, job(0, "warmup"))
    await _until_placed(hub, 1)
    total = int(rate * seconds)
    if bootstrap is None:
        submitted = await _offer_here(bus, topics, rate, total)
    else:
        submitted = await _offer_from_a_process(bootstrap, topics, rate, seconds)
    times = sorted(submitted.values())
    offered = (len(times) - 1) / (times[-1] - times[0])
    await _until_placed(hub, total + 1)
    await hub.stop()
    assigned = await assigned_times(bus, topics)
    waits = sorted(1000 * (assigned[u] - t) for u, t in submitted.items() if u in assigned)
    return {
        "offered_jobs_per_s": round(offered, 1),
        "jobs": total,
        "p50_ms": round(statistics.median(waits), 2),
        "p99_ms": round(waits[int(0.99 * (len(waits) - 1))], 2),
        "max_ms": round(waits[-1], 2),
    }


async def _offer_here(bus: Bus, topics: Topics, rate: float, total: int) -> dict[str, float]:
    run = uuid.uuid4().hex[:6]
    submitted: dict[str, float] = {}
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        document = job(i, run)
        submitted[job_uid_of(document) or ""] = await submit_document_nowait(bus, topics, document)
    await bus.flush()
    return submitted


async def _offer_from_a_process(
    bootstrap: str, topics: Topics, rate: float, seconds: float
) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-offer-") as folder:
        out = Path(folder) / "submitted.json"
        args = ["--bootstrap", bootstrap, "--prefix", topics.prefix, "--rate", str(rate)]
        args += ["--seconds", str(seconds), "--out", str(out)]
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.offer_jobs", *args
        )
        if await process.wait() != 0:
            raise RuntimeError(f"the offering producer failed (exit {process.returncode})")
        submitted: dict[str, float] = json.loads(out.read_text())
    return submitted


@asynccontextmanager
async def kafka_bus(bootstrap: str | None) -> AsyncIterator[tuple[KafkaBus, str]]:
    broker = None
    if bootstrap is None:
        from trainhub_sandbox.kafka_broker import start_kafka, stop_kafka

        broker = start_kafka(Path(tempfile.mkdtemp(prefix="bench-kafka-")))
        bootstrap = broker.bootstrap
    bus = KafkaBus(KafkaSettings(bootstrap=bootstrap))
    await bus.start()
    try:
        yield bus, bootstrap
    finally:
        await bus.close()
        if broker is not None:
            stop_kafka(broker)


async def main(jobs: int, rate: float, seconds: float, bootstrap: str | None) -> dict[str, Any]:
    memory = MemoryBus()
    await memory.start()
    report: dict[str, Any] = {
        "memory": {"throughput": await throughput(memory, jobs)},
    }
    report["memory"]["latency"] = await latency(memory, rate, seconds)
    async with kafka_bus(bootstrap) as (bus, address):
        report["kafka"] = {
            "throughput": await throughput(bus, jobs),
            "latency": await latency(bus, rate, seconds, bootstrap=address),
        }
    report["kafka_vs_memory_throughput"] = round(
        report["kafka"]["throughput"]["jobs_per_s"] / report["memory"]["throughput"]["jobs_per_s"],
        3,
    )
    return report


if __name__ == "__main__":
    setup_logging()  # trainhub's filters: aiokafka's self-retried errors are not failures
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--bootstrap")
    args = parser.parse_args()
    result = asyncio.run(main(args.jobs, args.rate, args.seconds, args.bootstrap))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kafka.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
