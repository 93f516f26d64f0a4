"""Batches of jobs in a row through a hub and `sim` workers run as processes on a real broker:
does a job cost the same however many came before it?

Per batch: wall time from the first submission to the last job's end, the hub's and the
workers' CPU per job (from /proc, user + system) from the first submission to the end of a
settling pause after the last job ended (by default both retentions below and 5 s, so that
each batch pays for its own finished jobs leaving; `_to_end`: up to the last job's end), and
their RSS after that pause. Written to bench/results/soak.json with the ratio of the last
batch's CPU per job to the first's, steadier measures of the same trend, and how much each
process's RSS grew over the second half of the batches (`trends`).

The hub runs with `--finished-retention` (default here 30 s, not the hub's 24 h), so that
its memory can level off within the run; the workers keep a finished run for their
`run_retention` (60 s). RSS should stop growing once finished jobs are past both.

Usage: python -m bench.soak [--batches N] [--jobs N] [--workers N] [--kind JAXJob|TrainJob]
[--finished-retention S] [--settle S] [--overdue-after S] [--bootstrap HOST:PORT]
[--profile DIR] [--object-counts DIR] [--memory-probe DIR].
Without --bootstrap a sandbox broker is started (and stopped). With --profile, hub and workers
run under cProfile, a profile per process and batch; with --object-counts, each writes its
live objects per type after each batch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from bench.hub_throughput import kafka_bus, submit_document_nowait
from bench.jobs import jax_job
from bus.base import Bus, Subscription, UnknownTopicError
from bus.reading import records_to_end
from bus.topics import Topics
from schemas.codec import decode_event
from schemas.events import EventType, JobStatusUpdate
from schemas.job_parsing import job_uid_of
from schemas.run_policy import TRAINHUB_MANAGER
from schemas.sim_annotations import SIM_DURATION
from schemas.trainer_runtimes import shipped_runtimes
from tests.kafka.processes import Process, sim_worker
from trainhub.logs import setup_logging
from workers.worker_config import WorkerConfig

RESULTS = Path(__file__).parent / "results"
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE


SOAK_RUNTIME = "soak-sim"
"""The runtime of `--kind trainjob`'s TrainJobs: plain, its node pods ending at once on sim."""


def soak_job(name: str, cleanup: str, kind: str = "JAXJob") -> dict[str, Any]:
    """A two-worker JAXJob whose sim pods end at once; or (`kind` TrainJob) a two-node
    TrainJob on `SOAK_RUNTIME`, which carries its runtime document through hub and worker."""
    if kind == "TrainJob":
        return {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "runtimeRef": {"name": SOAK_RUNTIME},
                "managedBy": TRAINHUB_MANAGER,
                "trainer": {
                    "numNodes": 2,
                    "resourcesPerNode": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                },
            },
        }
    document = jax_job(name, 2, "100m", "64Mi")
    spec = document["spec"]
    spec["runPolicy"]["cleanPodPolicy"] = cleanup
    template = spec["jaxReplicaSpecs"]["Worker"]["template"]
    template["metadata"] = {"annotations": {SIM_DURATION: "0s"}}
    return document


def write_soak_runtime(folder: Path) -> Path:
    """The shipped plain runtime as `SOAK_RUNTIME`, its node pods annotated to end at once
    on sim, in `folder` (for the hub's --runtimes)."""
    plain = next(r for r in shipped_runtimes() if r.metadata.name == "plain-distributed")
    document = plain.model_dump(mode="json", exclude_none=True)
    document["metadata"]["name"] = SOAK_RUNTIME
    for job in document["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]
        pod.setdefault("metadata", {}).setdefault("annotations", {})[SIM_DURATION] = "0s"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "soak-runtime.yaml").write_text(yaml.safe_dump(document))
    return folder


async def _ready(bus: Bus, topics: Topics, clusters: set[str], timeout: float = 300) -> None:
    """Wait until the topics exist and every worker has sent a heartbeat: on a loaded
    machine, starting takes longer than any fixed wait."""
    deadline = time.monotonic() + timeout
    heard: set[str] = set()
    while True:
        try:
            async for record in records_to_end(bus, topics.clusters):
                if record.key is not None:
                    heard.add(record.key.decode())
        except UnknownTopicError:
            pass
        if clusters <= heard:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no heartbeat from {sorted(clusters - heard)} in {timeout}s")
        await asyncio.sleep(1)


async def _status_from_now(bus: Bus, topics: Topics) -> Subscription:
    subscription = bus.subscribe([topics.status], group=None)
    await subscription.start()
    await subscription.seek_to_time(int(time.time() * 1000))
    return subscription


async def ended(
    subscription: Subscription, uids: set[str], timeout: float
) -> tuple[float, Counter[str]]:
    """Wait until every job of `uids` has a finished status; returns when the last did, and
    how many ended in each phase."""
    left = set(uids)
    phases: Counter[str] = Counter()
    last = time.monotonic()
    deadline = last + timeout
    try:
        while left:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(left)} of {len(uids)} jobs did not finish in {timeout}s")
            for record in await subscription.poll(timeout=1.0, max_records=10_000):
                event = decode_event(record.headers, record.value)
                if event.type != EventType.JOB_STATUS:
                    continue
                update = event.data_as(JobStatusUpdate)
                if update.uid in left and update.phase.finished:
                    left.discard(update.uid)
                    phases[update.phase.value] += 1
                    last = time.monotonic()
    finally:
        await subscription.stop()
    return last, phases


async def run(
    batches: int,
    jobs: int,
    workers: int,
    cleanup: str,
    bootstrap: str | None,
    finished_retention: float,
    profile: Path | None = None,
    overdue_after: float | None = None,
    settle: float = 0.0,
    kind: str = "JAXJob",
) -> dict[str, Any]:
    """`profile`: the processes run under cProfile (`look_inside`); each is told to
    write its batch's profile after each batch. `overdue_after`: the workers'
    `heartbeat_overdue_after`; below their heartbeat interval (1 s), every heartbeat comes
    after a sweep (workers/adoption.py), as on a loaded machine. `settle`: seconds waited
    after each batch's last job ended, counted in its CPU (`_to_end`: without it) and before
    its RSS is read."""
    if overdue_after is not None:
        os.environ["TRAINHUB_HEARTBEAT_OVERDUE_AFTER"] = str(overdue_after)
    logs = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    prefix = f"soak-{uuid.uuid4().hex[:6]}"
    async with kafka_bus(bootstrap) as (bus, address):
        topics = Topics(prefix=prefix)
        common = ["--bootstrap", address, "--topic-prefix", prefix]
        retention = ["--finished-retention", str(finished_retention)]
        runtimes = ["--runtimes", str(write_soak_runtime(logs / "runtimes"))]
        hub_args = ["hub", *common, "--max-heartbeat-age", "60", *retention]
        hub = Process("hub", [*runtimes, *hub_args], logs)
        capacity = "cpu=100000,memory=100000Gi,nodes=20"
        fleet = [
            sim_worker(f"c{i}", common, logs, capacity=capacity, heartbeat_interval=1.0)
            for i in range(workers)
        ]
        processes = [hub, *fleet]
        try:
            await _ready(bus, topics, {f"c{i}" for i in range(workers)})
            await asyncio.sleep(3)  # the hub hears them too
            rows: list[dict[str, Any]] = []
            for batch in range(batches):
                before = {p.name: cpu_seconds(p.popen.pid) for p in processes}
                documents = [soak_job(f"soak-{batch}-{i}", cleanup, kind) for i in range(jobs)]
                uids = {job_uid_of(d) or "" for d in documents}
                # Following the status topic from its end before the first submission.
                subscription = await _status_from_now(bus, topics)
                started = time.monotonic()
                for document in documents:
                    await submit_document_nowait(bus, topics, document)
                await bus.flush()
                last, phases = await ended(subscription, uids, timeout=1800)
                at_end = {p.name: cpu_seconds(p.popen.pid) for p in processes}
                # Each batch pays for its own clean-up (finished jobs leaving the hub and the
                # workers once their retention passed), not the next one.
                await asyncio.sleep(settle)
                after = {p.name: cpu_seconds(p.popen.pid) for p in processes}

                def per_job(
                    cpu: dict[str, float], *names: str, since: dict[str, float] = before
                ) -> float:
                    return round(1000 * sum(cpu[n] - since[n] for n in names) / jobs, 3)

                workers_named = [p.name for p in fleet]
                row = {
                    "batch": batch + 1,
                    "jobs": len(uids),
                    "ended": dict(phases),
                    "wall_s": round(last - started, 2),
                    "hub_cpu_ms_per_job": per_job(after, hub.name),
                    "worker_cpu_ms_per_job": per_job(after, *workers_named),
                    "hub_cpu_ms_per_job_to_end": per_job(at_end, hub.name),
                    "worker_cpu_ms_per_job_to_end": per_job(at_end, *workers_named),
                    "hub_rss_mb": round(rss_bytes(hub.popen.pid) / 2**20, 1),
                    "worker_rss_mb": [round(rss_bytes(p.popen.pid) / 2**20, 1) for p in fleet],
                    "load_average_1m": round(os.getloadavg()[0], 2),
                }
                if profile is not None:
                    for process in processes:  # this batch's profile of each
                        process.popen.send_signal(signal.SIGUSR1)
                if os.environ.get("TRAINHUB_OBJECT_COUNTS") or os.environ.get(
                    "TRAINHUB_MEMORY_PROBE"
                ):
                    for process in processes:  # each one's live objects per type
                        process.popen.send_signal(signal.SIGUSR2)
                print(json.dumps(row), flush=True)
                rows.append(row)
        finally:
            for process in processes:
                process.terminate()
    return {
        "batches": batches,
        "jobs_per_batch": jobs,
        "workers": workers,
        "kind": kind,
        "cleanPodPolicy": cleanup if kind != "TrainJob" else None,
        "hub_finished_retention_s": finished_retention,
        "worker_run_retention_s": WorkerConfig(cluster="-").run_retention,
        "worker_heartbeat_overdue_after_s": overdue_after,
        "settle_s": settle,
        "rows": rows,
        **trends(rows),
        "machine_cores": os.cpu_count(),
        "logs": str(logs),
    }


def trends(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Whether a job's cost grows with the batches before it. `last_to_first_*`: the issue's
    ratio of one batch to another, which a busy moment moves by ±15% on a 2-core machine;
    hence also the median of the last three batches over the first three's, and the slope
    of a least-squares line through every batch, as a fraction of the fitted first batch
    per batch (0.01: each batch 1% dearer than the first)."""
    found: dict[str, float] = {}
    for who in ("hub", "worker"):
        values = [float(row[f"{who}_cpu_ms_per_job"]) for row in rows]
        key = f"{who}_cpu_per_job"
        found[f"last_to_first_{key}"] = round(values[-1] / max(values[0], 1e-9), 3)
        if len(values) >= 6:
            ratio = statistics.median(values[-3:]) / max(statistics.median(values[:3]), 1e-9)
            found[f"last3_to_first3_median_{key}"] = round(ratio, 3)
        if len(values) >= 2:
            slope, intercept = statistics.linear_regression(range(1, len(values) + 1), values)
            found[f"fitted_growth_per_batch_{key}"] = round(slope / max(intercept + slope, 1e-9), 4)
    # RSS levelling off: what each process grew by over the second half of the batches.
    half = len(rows) // 2
    if half:
        found["hub_rss_mb_growth_second_half"] = round(
            float(rows[-1]["hub_rss_mb"]) - float(rows[half - 1]["hub_rss_mb"]), 1
        )
        found["worker_rss_mb_growth_second_half_max"] = round(
            max(
                float(end) - float(mid)
                for end, mid in zip(
                    rows[-1]["worker_rss_mb"], rows[half - 1]["worker_rss_mb"], strict=True
                )
            ),
            1,
        )
    return found


def look_inside(folder: Path, variable: str) -> None:
    """Every process started from here on imports bench/profiling/sitecustomize.py, which
    writes what `variable` asks for (profiles, object counts) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[variable] = str(folder.resolve())
    here = str(Path(__file__).parent / "profiling")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--clean-pod-policy", default="None", choices=["None", "All", "Running"])
    parser.add_argument(
        "--kind",
        default="JAXJob",
        choices=["JAXJob", "TrainJob"],
        help="the jobs' kind: two-worker JAXJobs, or two-node TrainJobs on a plain runtime "
        "(each carrying its runtime document; --clean-pod-policy does not apply)",
    )
    parser.add_argument(
        "--finished-retention",
        type=float,
        default=30.0,
        help="seconds the hub keeps a finished job (its setting; 24 h by default)",
    )
    parser.add_argument("--bootstrap")
    parser.add_argument(
        "--profile",
        type=Path,
        help="profile hub and workers with cProfile: one .prof per process and batch here",
    )
    parser.add_argument(
        "--object-counts",
        type=Path,
        help="after each batch, each process writes its live objects per type here",
    )
    parser.add_argument(
        "--memory-probe",
        type=Path,
        help="after each batch, each process appends its RSS, Python's allocated blocks and "
        "its RSS after malloc_trim here (PYTHONTRACEMALLOC=N: and a tracemalloc snapshot)",
    )
    parser.add_argument(
        "--overdue-after",
        type=float,
        help="the workers' heartbeat_overdue_after; under 1 (their heartbeat interval), "
        "they sweep before every heartbeat",
    )
    parser.add_argument(
        "--settle",
        type=float,
        help="seconds to wait after each batch, counted in its CPU (default: the hub's "
        "and the workers' retention, plus 5 s, so that each batch pays its own clean-up)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS / "soak.json")
    args = parser.parse_args()
    setup_logging()
    if args.profile is not None:
        look_inside(args.profile, "TRAINHUB_CPROFILE")
    if args.object_counts is not None:
        look_inside(args.object_counts, "TRAINHUB_OBJECT_COUNTS")
    if args.memory_probe is not None:
        look_inside(args.memory_probe, "TRAINHUB_MEMORY_PROBE")
    settle = args.settle
    if settle is None:
        settle = max(args.finished_retention, WorkerConfig(cluster="-").run_retention) + 5
    result = asyncio.run(
        run(
            args.batches,
            args.jobs,
            args.workers,
            args.clean_pod_policy,
            args.bootstrap,
            args.finished_retention,
            args.profile,
            args.overdue_after,
            settle,
            args.kind,
        )
    )
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))
    sys.exit(0)


if __name__ == "__main__":
    main()
