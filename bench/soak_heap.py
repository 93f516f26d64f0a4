"""What a hub and its workers keep per job once finished jobs are past their retention:
batches of jobs through the hub and `sim` workers in one process over the in-memory bus,
with tracemalloc and the live objects per type compared between batches.

Deterministic and cheap next to `bench.soak` (no broker, no processes): after each batch
and a pause past both retentions, a full collection, then the net growth since the batch
before, by traceback (allocations of the in-memory bus's own logs, which a broker would
hold, are left out) and by object type. Flat from the second batch on means the hub and
the workers keep nothing per finished job past their retention.

What it found (#27): the one thing kept per job past both retentions was the derived-uid
cache (`derive_job_uid`, about 290 B a job for 65,536 jobs); the rest of the net growth is the
in-memory bus's records (their topic names) and the bench's own. Objects per type stayed flat
from the second batch on. With tracemalloc on, the hub and workers run about 25 times slower.

Usage: python -m bench.soak_heap [--batches N] [--jobs N] [--workers N] [--retention S]
[--top N] [--frames N] [--no-tracemalloc]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import linecache
import time
import tracemalloc
from collections import Counter
from typing import Any

from bench.copying_bus import CopyingBus
from bench.soak import soak_job
from schemas.job_parsing import job_uid_of
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.producer import follow_status
from trainhub.settings import TrainhubSettings
from workers.cluster_spec import parse_cluster_spec

_LEFT_OUT = [
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, linecache.__file__),
    tracemalloc.Filter(False, "*/bus/memory.py", all_frames=True),
    tracemalloc.Filter(False, "*/bench/copying_bus.py", all_frames=True),
]


def type_counts() -> Counter[str]:
    return Counter(type(o).__qualname__ for o in gc.get_objects())


def _where(stat: tracemalloc.StatisticDiff, frames: int) -> str:
    ours = [f for f in stat.traceback if "/site-packages/" not in f.filename]
    shown = (ours or list(stat.traceback))[-frames:]
    return " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in reversed(shown))


async def finished(system: Embedded, uids: set[str], since_ms: int) -> None:
    """Until every job of `uids` ended, reading the status topic from `since_ms` on."""
    left = set(uids)
    async with asyncio.timeout(600):
        async for update in follow_status(system.bus, system.topics, from_time_ms=since_ms):
            if update.phase.finished:
                left.discard(update.uid)
                if not left:
                    return


async def run(
    batches: int, jobs: int, workers: int, retention: float, top: int, frames: int, trace: bool
) -> list[dict[str, Any]]:
    settings = TrainhubSettings(finished_retention=retention, run_retention=retention)
    clusters = [
        parse_cluster_spec(f"c{i}:cpu=100000,memory=100000Gi,nodes=20") for i in range(workers)
    ]
    options = EmbeddedOptions(
        clusters=clusters,
        backend="sim",
        heartbeat_interval=1.0,
        max_heartbeat_age=60.0,
        settings=settings,
    )
    rows: list[dict[str, Any]] = []
    async with Embedded(options, bus=CopyingBus()) as system:
        await asyncio.sleep(2)
        previous: tracemalloc.Snapshot | None = None
        counts = type_counts()
        for batch in range(batches):
            documents = [soak_job(f"soak-{batch}-{i}", "None") for i in range(jobs)]
            uids = {job_uid_of(d) or "" for d in documents}
            started = time.process_time()
            wall = time.monotonic()
            waiting = asyncio.create_task(finished(system, uids, int(time.time() * 1000)))
            await asyncio.sleep(0)
            for document in documents:
                await system.submit(document)
            await waiting
            ended_wall = time.monotonic() - wall
            await asyncio.sleep(retention * 2 + 3)
            cpu = time.process_time() - started
            gc.collect()
            now_counts = type_counts()
            grown = (now_counts - counts).most_common(top)
            counts = now_counts
            row: dict[str, Any] = {
                "batch": batch + 1,
                "cpu_ms_per_job": round(1000 * cpu / jobs, 3),
                "wall_to_end_s": round(ended_wall, 2),
                "objects": sum(now_counts.values()),
                "objects_grown": grown,
                "hub_jobs": len(system.hub.ledger._jobs),
                "worker_runs": [len(w.runs) for w in system.workers],
            }
            if trace and not tracemalloc.is_tracing():
                # From the second batch on: the first one's warm-up is not growth.
                tracemalloc.start(frames)
            elif trace:
                snapshot = tracemalloc.take_snapshot().filter_traces(_LEFT_OUT)
                row["traced_mb"] = round(
                    sum(s.size for s in snapshot.statistics("filename")) / 2**20, 2
                )
                if previous is not None:
                    diff = snapshot.compare_to(previous, "traceback")
                    row["net_bytes_per_job"] = round(sum(d.size_diff for d in diff) / jobs, 1)
                    row["grown_by"] = [
                        (d.size_diff, d.count_diff, _where(d, frames))
                        for d in diff[:top]
                        if d.size_diff > 0
                    ]
                previous = snapshot
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--retention", type=float, default=2.0)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--no-tracemalloc", action="store_true")
    args = parser.parse_args()
    asyncio.run(
        run(
            args.batches,
            args.jobs,
            args.workers,
            args.retention,
            args.top,
            args.frames,
            not args.no_tracemalloc,
        )
    )


if __name__ == "__main__":
    main()
