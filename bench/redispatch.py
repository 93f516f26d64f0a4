"""Re-dispatch time after a cluster loss: how long the hub takes to notice that a cluster fell
silent and to place its jobs on the others (in-memory bus, heartbeats as sim workers send).

Three clusters of 50 nodes heartbeat every `--heartbeat-interval` s; `--jobs` jobs are placed
over them; then the cluster holding the most goes silent, as one whose worker or apiserver
died. Every time is taken from the CloudEvent times on the status topic, counted from that
cluster's last heartbeat (its `observedAt`):
- `lost_s`: until the hub declares it lost, its jobs' first `Redispatched` status: at least
  `lost_after` (`--lost-after`, the hub's setting, default 30 s; 5 s here to keep runs short),
  plus up to one check of the heartbeat feed (every min(0.5, lost_after / 10) s);
- `reassigned_s`: until each of its jobs is Assigned to another cluster (p50, p99, max);
- `reaction_s`: from the first `Redispatched` to the last job Assigned again, the hub's own
  work once it knows.

Usage: python -m bench.redispatch [--lost-after 5] [--jobs 300] [--heartbeat-interval 1]
Writes bench/results/redispatch.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bench.jobs import jax_job
from bus.events import publish_event
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import REDISPATCHED, Hub, HubConfig
from schemas.cluster import ClusterSnapshot, NodeSnapshot
from schemas.codec import decode_event
from schemas.events import EventType, JobStatusUpdate, make_event
from schemas.quantity import parse_quantity
from schemas.status import JobPhase
from trainhub.producer import submit_document

RESULTS = Path(__file__).parent / "results" / "redispatch.json"
CLUSTERS = ("east", "north", "west")
NODES = 50


def job(index: int) -> dict[str, Any]:
    return jax_job(f"moved-{index}", 2, "1", "2Gi")


def snapshot(name: str) -> ClusterSnapshot:
    nodes = [
        NodeSnapshot(
            name=f"{name}-n{n}",
            allocatable={
                "cpu": parse_quantity("64"),
                "memory": parse_quantity("256Gi"),
                "pods": parse_quantity("110"),
            },
        )
        for n in range(NODES)
    ]
    return ClusterSnapshot(name=name, nodes=nodes, observedAt=datetime.now(UTC))


class Heartbeats:
    """The clusters' workers: a heartbeat from each live cluster every interval."""

    def __init__(self, bus: MemoryBus, topics: Topics, interval: float) -> None:
        self.bus, self.topics, self.interval = bus, topics, interval
        self.live = set(CLUSTERS)
        self.last: dict[str, datetime] = {}

    async def beat(self) -> None:
        for name in sorted(self.live):
            beat = snapshot(name)
            event = make_event(EventType.CLUSTER_HEARTBEAT, f"worker/{name}", name, beat)
            await publish_event(self.bus, self.topics.clusters, name, event)
            assert beat.observedAt is not None
            self.last[name] = beat.observedAt

    async def run(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.interval)


async def until(condition: Any, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.005)


async def status_history(bus: MemoryBus, topics: Topics) -> list[tuple[JobStatusUpdate, float]]:
    subscription = bus.subscribe([topics.status], group=None)
    await subscription.start()
    found: list[tuple[JobStatusUpdate, float]] = []
    try:
        while True:
            records = await subscription.poll(timeout=0.2, max_records=10_000)
            for record in records:
                event = decode_event(record.headers, record.value)
                if event.type == EventType.JOB_STATUS:
                    found.append((event.data_as(JobStatusUpdate), event.time.timestamp()))
            if not records and await subscription.lag() == 0:
                return found
    finally:
        await subscription.stop()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def run(jobs: int, lost_after: float, interval: float) -> dict[str, Any]:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="redispatch")
    config = HubConfig(lost_after=lost_after, max_heartbeat_age=max(30.0, 3 * lost_after))
    hub = Hub(bus, topics, config, registry=CollectorRegistry())
    heartbeats = Heartbeats(bus, topics, interval)
    await hub.start()  # creates the topics
    beating = asyncio.create_task(heartbeats.run(), name="bench-heartbeats")
    try:
        await until(lambda: len(hub.clusters.all()) == len(CLUSTERS), 30, "the heartbeats")
        uids = [await submit_document(bus, topics, job(i)) for i in range(jobs)]

        def placed() -> bool:
            return all(
                (r := hub.ledger.get(uid)) is not None and r.phase == JobPhase.ASSIGNED
                for uid in uids
            )

        await until(placed, 60, f"{jobs} jobs to be assigned")
        held: dict[str, list[str]] = {name: [] for name in CLUSTERS}
        for uid in uids:
            record = hub.ledger.get(uid)
            assert record is not None and record.cluster is not None
            held[record.cluster].append(uid)
        victim = max(CLUSTERS, key=lambda name: len(held[name]))
        heartbeats.live.discard(victim)
        moved = held[victim]

        def elsewhere() -> bool:
            return all(
                (r := hub.ledger.get(uid)) is not None
                and r.phase == JobPhase.ASSIGNED
                and r.cluster not in (None, victim)
                for uid in moved
            )

        await until(elsewhere, lost_after + 60, f"the jobs of {victim} to be assigned again")
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
        await hub.stop()
    history = await status_history(bus, topics)
    await bus.close()
    last_beat = heartbeats.last[victim].timestamp()
    redispatched: dict[str, float] = {}
    reassigned: dict[str, float] = {}
    for update, at in history:
        if update.uid not in moved:
            continue
        if update.reason == REDISPATCHED and update.uid not in redispatched:
            redispatched[update.uid] = at
        elif (
            update.phase == JobPhase.ASSIGNED
            and update.uid in redispatched
            and update.cluster != victim
            and update.uid not in reassigned
        ):
            reassigned[update.uid] = at
    assert set(reassigned) == set(moved), "every job of the lost cluster is assigned again"
    since_beat = [reassigned[uid] - last_beat for uid in moved]
    lost = min(redispatched.values()) - last_beat
    reaction = max(reassigned.values()) - min(redispatched.values())
    result = {
        "clusters": len(CLUSTERS),
        "nodes_per_cluster": NODES,
        "jobs": jobs,
        "jobs_moved": len(moved),
        "lost_after_s": lost_after,
        "heartbeat_interval_s": interval,
        "lost_s": round(lost, 3),
        "reassigned_s": {
            "p50": round(statistics.median(since_beat), 3),
            "p99": round(percentile(since_beat, 0.99), 3),
            "max": round(max(since_beat), 3),
        },
        "reaction_s": round(reaction, 3),
    }
    print(
        f"{len(moved)} of {jobs} jobs on {victim}; lost_after {lost_after:g}s: declared lost "
        f"{lost:.2f}s after its last heartbeat, all its jobs assigned elsewhere "
        f"{max(since_beat):.2f}s after it (the hub's reaction once it knew: {reaction:.3f}s)",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--lost-after", type=float, default=5.0)
    parser.add_argument("--heartbeat-interval", type=float, default=1.0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    # The hub logs each job it moves, as it should in production; here that is 100s of lines.
    logging.getLogger("dispatcher").setLevel(logging.CRITICAL)
    result = asyncio.run(run(args.jobs, args.lost_after, args.heartbeat_interval))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
