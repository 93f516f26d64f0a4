"""Pods through the whole system onto real apiservers: M jobs of K pods submitted at once, a hub
and one `kube` worker per cluster on a real broker (or the in-memory bus), three sandbox member
clusters whose kube-scheduler binds the pods to KWOK nodes.

Written to bench/results/kube.json:
- pods created per second per cluster, as the cluster's admin watch sees them arrive (over the
  whole run, and within one job's burst of creates);
- submit -> all of a job's pods bound (spec.nodeName set) latency, p50 / p99 / max;
- apiserver requests per job (the workers' `KubeApi.requests`, split by verb and resource),
  against the target "a small constant plus one create per object";
- the CPU this process (hub, workers, the bench's watches) spent per pod, and the whole
  machine's by role (control-plane processes, broker), with the cores the target rate would
  need at that cost;
- then, on the same clusters, the run's objects created straight without trainhub (per cluster
  the jobs the hub gave it), for comparison (`--no-ceiling` skips it).

Usage: python -m bench.kube_throughput [--jobs M] [--pods K] [--memory-bus] [--serial-submit]
       [--bootstrap HOST:PORT] [--heartbeat-interval S] [--no-ceiling] [--only CLUSTER]
       [--output FILE]
Without --bootstrap (and without --memory-bus) a sandbox broker is started for the run; the
clusters are always started, in a temporary directory, and stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from prometheus_client import CollectorRegistry

from bench import machine_cpu
from bench.jobs import jax_job
from bus.base import Bus
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.codec import decode_event
from schemas.errors import EventDecodeError
from schemas.events import EventType, JobStatusUpdate
from schemas.job_parsing import parse_job
from schemas.status import JobPhase
from trainhub.logs import setup_logging
from trainhub.producer import submit_document
from trainhub_sandbox.kube_cluster import (
    KubeSandbox,
    KwokNodeGroup,
    MemberCluster,
    MemberClusterPlan,
    start_member_clusters,
    stop_member_clusters,
)
from workers.backends.kube import MANAGED_SELECTOR, KubeBackend
from workers.backends.kube_client import KubeApi
from workers.metrics import KUBE_API
from workers.rendering import LABEL_JOB_UID, PodPlan, ServicePlan, render_job
from workers.worker import CREATE_CONCURRENCY, Worker, WorkerConfig

RESULTS = Path(__file__).parent / "results"
TARGET_PODS_PER_SECOND = 100.0
H100 = "NVIDIA-H100-80GB-HBM3"

# Three clusters of different capacity (one with H100 nodes), each with room for every job.
CLUSTERS = (
    MemberClusterPlan("small", pools=(KwokNodeGroup(count=2, cpu="32", memory="128Gi", pods=500),)),
    MemberClusterPlan("large", pools=(KwokNodeGroup(count=4, cpu="64", memory="256Gi", pods=500),)),
    MemberClusterPlan(
        "h100",
        pools=(
            KwokNodeGroup(
                count=2,
                cpu="48",
                memory="256Gi",
                pods=500,
                gpus=4,
                labels={"nvidia.com/gpu.product": H100},
                name="gpu",
            ),
        ),
    ),
)


def job(name: str, pods: int, duration: str) -> dict[str, Any]:
    """The bench's JAXJob: `pods` small workers that KWOK ends as Succeeded after `duration`."""
    document = jax_job(name, pods, cpu="10m", memory="16Mi")
    worker = document["spec"]["jaxReplicaSpecs"]["Worker"]
    worker["restartPolicy"] = "Never"
    worker["template"]["metadata"] = {"annotations": {"trainhub.io/sim-duration": duration}}
    worker["template"]["spec"]["containers"][0]["command"] = ["python", "-c", "pass"]
    return document


# --- what the clusters' admins see -----------------------------------------------------------


@dataclass
class PodTimes:
    """When each of our pods first appeared on a cluster and when it was first bound."""

    cluster: str
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    job_of: dict[str, str] = field(default_factory=dict)
    rewatches: int = 0
    """Times the apiserver ended the watch and it was resumed."""


async def watch_pods(cluster: MemberCluster, times: PodTimes, ready: asyncio.Event) -> None:
    """Follow every pod we manage on `cluster` with the admin token (one watch stream, resumed
    from the last resourceVersion whenever the apiserver ends it: an apiserver closes a watch
    that falls behind, which a busy machine makes happen mid-run)."""
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    base = (
        f"{cluster.server}/api/v1/pods?watch=true&timeoutSeconds=3600&allowWatchBookmarks=true"
        f"&labelSelector={quote(MANAGED_SELECTOR)}"
    )
    headers = {"Authorization": f"Bearer {cluster.admin_token}"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    version: str | None = None
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
        while True:
            url = base if version is None else f"{base}&resourceVersion={version}"
            async with session.get(url, ssl=context) as response:
                response.raise_for_status()
                ready.set()
                while line := await response.content.readline():
                    version = _note_pod(times, json.loads(line), version)
            times.rewatches += 1


def _note_pod(times: PodTimes, event: dict[str, Any], version: str | None) -> str | None:
    """Record one watch event; returns the resourceVersion to resume from."""
    pod = event.get("object") or {}
    metadata = pod.get("metadata") or {}
    if event.get("type") == "ERROR":
        raise RuntimeError(f"pod watch of {times.cluster} failed: {pod}")
    if event.get("type") not in ("BOOKMARK", "DELETED"):
        now = time.monotonic()
        key = f"{metadata.get('namespace')}/{metadata.get('name')}/{metadata.get('uid')}"
        times.created.setdefault(key, now)
        times.job_of.setdefault(key, (metadata.get("labels") or {}).get(LABEL_JOB_UID, ""))
        if (pod.get("spec") or {}).get("nodeName"):
            times.bound.setdefault(key, now)
    return metadata.get("resourceVersion") or version


# --- status on the bus -----------------------------------------------------------------------


@dataclass
class StatusTimes:
    assigned: dict[str, float] = field(default_factory=dict)
    finished: dict[str, JobPhase] = field(default_factory=dict)
    cluster: dict[str, str] = field(default_factory=dict)


async def follow_status(bus: Bus, topics: Topics, times: StatusTimes) -> None:
    subscription = bus.subscribe([topics.status], group=None, start_from="earliest")
    await subscription.start()
    try:
        while True:
            for record in await subscription.poll(timeout=0.2, max_records=5000):
                try:
                    event = decode_event(record.headers, record.value)
                except EventDecodeError:
                    continue
                if event.type != EventType.JOB_STATUS:
                    continue
                update = event.data_as(JobStatusUpdate)
                if update.phase == JobPhase.ASSIGNED:
                    times.assigned.setdefault(update.uid, event.time.timestamp())
                    times.cluster[update.uid] = update.cluster or ""
                if update.phase.finished:
                    times.finished[update.uid] = update.phase
    finally:
        await subscription.stop()


# --- the run ---------------------------------------------------------------------------------


@contextmanager
def sandbox_clusters(workdir: Path, only: str | None = None) -> Iterator[KubeSandbox]:
    specs = [spec for spec in CLUSTERS if only is None or spec.name == only]
    sandbox = start_member_clusters(specs, workdir / "kube")
    try:
        yield sandbox
    finally:
        stop_member_clusters(sandbox)


def worker_backend(name: str, cluster: MemberCluster) -> KubeBackend:
    """A `kube` backend with the cluster's least-privilege worker identity."""
    return KubeBackend(
        cluster.worker_kubeconfig,
        cluster=name,
        context=cluster.worker_context,
        namespaces=cluster.worker_namespaces,
    )


@asynccontextmanager
async def make_bus(
    memory: bool, bootstrap: str | None, workdir: Path
) -> AsyncIterator[tuple[Bus, int | None]]:
    """The run's bus, and the PID of the broker started for it (None when there is none)."""
    broker = None
    bus: Bus
    if memory:
        bus = MemoryBus()
    else:
        if bootstrap is None:
            from trainhub_sandbox.kafka_broker import start_kafka, stop_kafka

            broker = start_kafka(workdir / "kafka")
            bootstrap = broker.bootstrap
        bus = KafkaBus(KafkaSettings(bootstrap=bootstrap))
    await bus.start()
    try:
        yield bus, broker.pid if broker is not None else None
    finally:
        await bus.close()
        if broker is not None:
            stop_kafka(broker)


def api_samples() -> dict[tuple[str, str, str], float]:
    """Requests so far per (cluster, verb, resource), every status code together."""
    counts: dict[tuple[str, str, str], float] = {}
    for family in KUBE_API.requests.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                labels = sample.labels
                key = (labels["cluster"], labels["verb"], labels["resource"])
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def create_latency_ms() -> dict[str, float]:
    """Mean time to the apiserver's answer to one create, per cluster."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in KUBE_API.duration.collect():
        for sample in family.samples:
            cluster = sample.labels.get("cluster", "")
            if sample.labels.get("verb") != "create":
                continue
            if sample.name.endswith("_sum"):
                sums[cluster] = sums.get(cluster, 0.0) + sample.value
            elif sample.name.endswith("_count"):
                counts[cluster] = counts.get(cluster, 0.0) + sample.value
    return {c: round(1000 * sums[c] / counts[c], 2) for c in counts if counts[c]}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


THIS_PROCESS = "this process (hub, workers, bench watches)"


def process_groups(sandbox: KubeSandbox, broker_pid: int | None) -> dict[str, list[int]]:
    """The machine's busy processes by role: this one, each kind of control-plane process
    (all clusters together), the broker."""
    groups: dict[str, list[int]] = {THIS_PROCESS: [os.getpid()]}
    for process in sandbox.processes():
        groups.setdefault(process.name, []).append(process.pid)
    if broker_pid is not None:
        groups["kafka broker"] = [broker_pid]
    return groups


async def run(
    args: argparse.Namespace, sandbox: KubeSandbox, bus: Bus, broker_pid: int | None = None
) -> dict[str, Any]:
    topics = Topics(prefix=f"kbench{uuid.uuid4().hex[:8]}")
    registry = CollectorRegistry()
    hub = Hub(bus, topics, HubConfig(max_heartbeat_age=60, lost_after=120), registry=registry)
    workers: dict[str, Worker] = {}
    backends: dict[str, KubeBackend] = {}
    for name, cluster in sandbox.clusters.items():
        backend = backends[name] = worker_backend(name, cluster)
        config = WorkerConfig(
            cluster=name,
            heartbeat_interval=args.heartbeat_interval,
            namespaces=list(cluster.worker_namespaces),
            # Matched to this hub, as a deployment would be (below its max_heartbeat_age):
            # the default of three intervals made loaded workers sweep every job while this
            # hub would wait 120 s before taking any away.
            overdue_after=30.0,
        )
        workers[name] = Worker(bus, backend, config, topics, registry=registry)
    pods = {name: PodTimes(name) for name in sandbox.clusters}
    status = StatusTimes()
    tasks: list[asyncio.Task[None]] = []
    await hub.start()
    started: list[Worker] = []
    try:
        for name, cluster in sandbox.clusters.items():
            ready = asyncio.Event()
            tasks.append(asyncio.create_task(watch_pods(cluster, pods[name], ready)))
            await asyncio.wait_for(ready.wait(), 30)
        tasks.append(asyncio.create_task(follow_status(bus, topics, status)))
        for worker in workers.values():
            await worker.start()
            started.append(worker)
        while {s.name for s in hub.clusters.all()} != set(sandbox.clusters):  # noqa: ASYNC110
            await asyncio.sleep(0.05)

        before = api_samples()
        requests_before = {n: b.api.requests for n, b in backends.items()}
        run_id = uuid.uuid4().hex[:5]
        submitted: dict[str, tuple[float, float]] = {}

        async def submit(i: int) -> None:
            document = job(f"kb-{run_id}-{i}", args.pods, args.duration)
            wall, mono = time.time(), time.monotonic()
            uid = await submit_document(bus, topics, document)
            submitted[uid] = (wall, mono)

        groups = process_groups(sandbox, broker_pid)
        began = time.monotonic()
        machine_began = machine_cpu.sample(groups)
        if args.serial_submit:
            for i in range(args.jobs):
                await submit(i)
        else:
            # At once: each publish still waits for its own acknowledgement, but none waits
            # for the one before (the producer batches them), as with many pipelines at once.
            await asyncio.gather(*(submit(i) for i in range(args.jobs)))
        submit_seconds = time.monotonic() - began
        total_pods = args.jobs * args.pods

        def bound() -> int:
            for task in tasks:
                if task.done():
                    task.result()  # a watch or the status follower failed: say why, now
            return sum(len(p.bound) for p in pods.values())

        deadline = time.monotonic() + args.timeout
        while bound() < total_pods and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        all_bound = time.monotonic() - began
        machine_bound = machine_cpu.sample(groups)
        while len(status.finished) < args.jobs and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        all_finished = time.monotonic() - began
        await asyncio.sleep(0.2)
        after = api_samples()
        requests_after = {n: b.api.requests for n, b in backends.items()}
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for worker in started:
            await worker.stop()
        await hub.stop()

    return report(
        args,
        pods,
        status,
        submitted,
        before,
        after,
        requests_before,
        requests_after,
        timings={
            "submit_all_s": round(submit_seconds, 3),
            "all_pods_bound_s": round(all_bound, 3),
            "all_jobs_finished_s": round(all_finished, 3),
        },
        cpu_to_bound=machine_bound.groups_s[THIS_PROCESS] - machine_began.groups_s[THIS_PROCESS],
        machine=machine_cpu.split_per_item(
            machine_began,
            machine_bound,
            all_bound,
            args.jobs * args.pods,
            TARGET_PODS_PER_SECOND * len(sandbox.clusters),
        ),
    )


def report(
    args: argparse.Namespace,
    pods: dict[str, PodTimes],
    status: StatusTimes,
    submitted: dict[str, tuple[float, float]],
    before: dict[tuple[str, str, str], float],
    after: dict[tuple[str, str, str], float],
    requests_before: dict[str, int],
    requests_after: dict[str, int],
    timings: dict[str, float],
    cpu_to_bound: float,
    machine: dict[str, Any],
) -> dict[str, Any]:
    clusters: dict[str, Any] = {}
    bound_at: dict[str, list[float]] = {}
    created_by_job: dict[str, list[float]] = {}
    for name, times in pods.items():
        for key, when in times.bound.items():
            bound_at.setdefault(times.job_of[key], []).append(when)
        for key, when in times.created.items():
            created_by_job.setdefault(times.job_of[key], []).append(when)
        created, window, rate = creation_rate(times)
        jobs_here = {times.job_of[k] for k in times.created}
        bursts = [
            (len(ts) - 1) / (max(ts) - min(ts))
            for uid, ts in created_by_job.items()
            if uid in jobs_here and len(ts) > 1 and max(ts) > min(ts)
        ]
        clusters[name] = {
            "jobs": len(jobs_here),
            "pods_created": len(created),
            "pods_bound": len(times.bound),
            "creation_window_s": round(window, 3),
            "pods_created_per_s": rate,
            "pods_created_per_s_within_a_job_p50": (
                round(statistics.median(bursts), 1) if bursts else None
            ),
            "watch_resumed": times.rewatches,
        }
    latencies = [
        max(bound_at[uid]) - mono
        for uid, (_, mono) in submitted.items()
        if len(bound_at.get(uid, [])) == args.pods
    ]
    to_assigned = [
        status.assigned[uid] - wall
        for uid, (wall, _) in submitted.items()
        if uid in status.assigned
    ]
    per_job = per_job_requests(args, before, after, status, requests_before, requests_after)
    latency_creates = create_latency_ms()
    for name, mean in latency_creates.items():
        if name in clusters:
            clusters[name]["create_request_ms_mean"] = mean
            # What creating one pod after another would give (a Service, then its Pod).
            clusters[name]["sequential_bound_pods_per_s"] = round(1000 / (2 * mean), 1)
    rates = [c["pods_created_per_s"] or 0.0 for c in clusters.values()]
    return {
        "bus": "memory" if args.memory_bus else "kafka",
        "submit": "serial" if args.serial_submit else "at once",
        "jobs": args.jobs,
        "pods_per_job": args.pods,
        "heartbeat_interval_s": args.heartbeat_interval,
        "timings": timings,
        "trainhub_cpu": trainhub_cpu(cpu_to_bound, sum(len(p.created) for p in pods.values())),
        # Submit to all bound, every process: at the target rate on every cluster at once, at
        # this cost per pod, how many cores the whole sandbox would keep busy.
        "machine_cpu_submit_to_all_bound": machine,
        "jobs_finished": Counter(p.value for p in status.finished.values()),
        "clusters": clusters,
        "submit_to_all_pods_bound_s": {
            "jobs": len(latencies),
            "p50": round(percentile(latencies, 0.5), 3) if latencies else None,
            "p99": round(percentile(latencies, 0.99), 3) if latencies else None,
            "max": round(max(latencies), 3) if latencies else None,
        },
        "submit_to_assigned_s": {
            "p50": round(percentile(to_assigned, 0.5), 3) if to_assigned else None,
            "p99": round(percentile(to_assigned, 0.99), 3) if to_assigned else None,
        },
        "api_requests_per_job": per_job,
        "target": {
            "pods_created_per_s_per_cluster": TARGET_PODS_PER_SECOND,
            "met_pods_per_s": min(rates) >= TARGET_PODS_PER_SECOND,
            "requests_per_job": "a small constant + one create per object",
            "met_requests_per_job": per_job["beyond_one_create_per_object"] <= 10,
        },
    }


def creation_rate(times: PodTimes) -> tuple[list[float], float, float | None]:
    """The pods' creation times in order, the window from first to last, and pods created
    per second over it (None with fewer than two pods or no window)."""
    created = sorted(times.created.values())
    window = created[-1] - created[0] if len(created) > 1 else 0.0
    return created, window, round((len(created) - 1) / window, 1) if window else None


def trainhub_cpu(seconds: float, pods: int) -> dict[str, Any]:
    """CPU the process spent from the submissions to the last pod bound, per pod: the hub,
    the three workers, and this bench's own watches and status follower (so an upper bound
    on what dispatching costs). Its inverse is the rate one core would sustain."""
    per_pod = seconds / pods if pods else None
    return {
        "cpu_s_submit_to_all_bound": round(seconds, 3),
        "cpu_ms_per_pod": round(1000 * per_pod, 2) if per_pod else None,
        "pods_per_s_one_core_allows": round(1 / per_pod, 1) if per_pod else None,
    }


def per_job_requests(
    args: argparse.Namespace,
    before: dict[tuple[str, str, str], float],
    after: dict[tuple[str, str, str], float],
    status: StatusTimes,
    requests_before: dict[str, int],
    requests_after: dict[str, int],
) -> dict[str, Any]:
    """Requests during the run per job, split by verb and resource; what is not a create is
    the per-job constant (periodic heartbeats included, so it shrinks as M grows)."""
    delta: dict[str, float] = {}
    for key, value in after.items():
        moved = value - before.get(key, 0.0)
        if moved:
            name = f"{key[1]} {key[2]}"
            delta[name] = delta.get(name, 0.0) + moved
    total = sum(requests_after.values()) - sum(requests_before.values())
    jobs = max(1, args.jobs)
    objects = 2 * args.pods  # a pod and its headless service per replica
    creates = delta.get("create pods", 0) + delta.get("create services", 0)
    per_job = {k: round(v / jobs, 2) for k, v in sorted(delta.items())}
    constant = (total - creates) / jobs
    return {
        "objects_per_job": objects,
        "total": round(total / jobs, 2),
        "creates": round(creates / jobs, 2),
        "by_verb_and_resource": per_job,
        "beyond_one_create_per_object": round(constant + (creates / jobs - objects), 2),
        "note": (
            "total includes each worker's periodic heartbeat list of bound pods (one per "
            "interval; nodes come from a watch), watch requests and the heartbeat sent after "
            "each job finishes"
        ),
    }


# --- what the apiservers take without the worker ----------------------------------------------


def probe_pod(run: str, index: int) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": "trainhub", LABEL_JOB_UID: f"probe-{run}"}
    container = {
        "name": "jax",
        "image": "example/jax:1",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"probe-{run}-{index}", "labels": labels},
        "spec": {"containers": [container], "restartPolicy": "Never"},
    }


async def create_burst(api: KubeApi, run: str, count: int, concurrency: int) -> float:
    """Pods created per second, `concurrency` creates in flight."""
    limit = asyncio.Semaphore(concurrency)

    async def create(index: int) -> None:
        async with limit:
            manifest = probe_pod(run, index)
            create_pod = api.core.create_namespaced_pod
            await api.call("create", "pods", "default", create_pod, "default", manifest)

    began = time.monotonic()
    await asyncio.gather(*(create(i) for i in range(count)))
    return round(count / (time.monotonic() - began), 1)


async def probe_create_rates(sandbox: KubeSandbox, count: int) -> dict[str, Any]:
    """Pod creates per second one cluster at a time, with the worker's identity and client:
    awaited one by one (what the worker does), and 16 in flight. The ceiling the apiserver,
    scheduler and KWOK allow on this machine, for comparison with the worker's rate."""
    rates: dict[str, Any] = {}
    for name, cluster in sandbox.clusters.items():
        backend = worker_backend(name, cluster)
        await backend.start()
        found: dict[str, float] = {}
        try:
            for concurrency in (1, 16):
                run = uuid.uuid4().hex[:5]
                rate = await create_burst(backend.api, run, count, concurrency)
                found[f"concurrency_{concurrency}"] = rate
                await backend.delete_job(f"probe-{run}")
        finally:
            await backend.close()
        rates[name] = found
    return rates


def compare_with_ceiling(result: dict[str, Any], ceiling: dict[str, Any]) -> None:
    """Put the rate without trainhub beside each cluster's, and their ratio."""
    for name, rate in ceiling.items():
        cluster = result["clusters"].get(name)
        if cluster is None:
            continue
        cluster["pods_created_per_s_without_trainhub"] = rate
        ours = cluster.get("pods_created_per_s")
        cluster["share_of_rate_without_trainhub"] = round(ours / rate, 2) if ours and rate else None


async def create_like_the_worker(
    backend: KubeBackend, documents: list[dict[str, Any]], concurrency: int
) -> None:
    """Every replica's Service then Pod, as rendered by the worker, `concurrency` replicas
    being created at once over all the jobs (the worker's own bound)."""
    limit = asyncio.Semaphore(concurrency)

    async def create(uid: str, service: ServicePlan | None, pod: PodPlan) -> None:
        async with limit:
            if service is not None:
                await backend.create_service(uid, service)
            await backend.create_pod(uid, pod)

    creates = []
    for document in documents:
        rendered = render_job(
            parse_job(document), backend.network(), wait_for_master=backend.init_containers
        )
        uid = rendered.job.uid
        services = {service.name: service for service in rendered.services}
        for pod in rendered.pods:
            creates.append(create(uid, services.get(pod.name), pod))
    await asyncio.gather(*creates)


async def probe_without_trainhub(
    sandbox: KubeSandbox, jobs_per_cluster: dict[str, int], pods: int, duration: str
) -> dict[str, Any]:
    """The run's work without trainhub: each cluster gets as many jobs as the hub gave it,
    each job's objects rendered by the worker's renderer and created straight on the three
    apiservers at once, as many in flight per cluster as a worker allows; no hub, bus or
    worker loop. Pods created per second per cluster, seen by the same admin watch as the run.
    Run after it, on warm apiservers and with the broker stopped: an optimistic bound on what
    any dispatcher could get here, not a like-for-like rerun."""
    run_id = uuid.uuid4().hex[:5]
    times = {name: PodTimes(name) for name in sandbox.clusters}
    backends: dict[str, KubeBackend] = {}
    watches: list[asyncio.Task[None]] = []
    documents: dict[str, list[dict[str, Any]]] = {}
    try:
        for name, cluster in sandbox.clusters.items():
            backend = backends[name] = worker_backend(name, cluster)
            await backend.start()
            ready = asyncio.Event()
            watches.append(asyncio.create_task(watch_pods(cluster, times[name], ready)))
            await asyncio.wait_for(ready.wait(), 30)
            documents[name] = []
            for i in range(jobs_per_cluster.get(name, 0)):
                document = job(f"kc-{run_id}-{name}-{i}", pods, duration)
                document["metadata"]["uid"] = f"ceiling-{run_id}-{name}-{i}"
                documents[name].append(document)
        await asyncio.gather(
            *(
                create_like_the_worker(backends[name], documents[name], CREATE_CONCURRENCY)
                for name in sandbox.clusters
            )
        )
        await asyncio.sleep(0.5)  # the watch's last events
        return {name: creation_rate(seen)[2] for name, seen in times.items()}
    finally:
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        for name, backend in backends.items():
            for document in documents.get(name, []):
                await backend.delete_job(document["metadata"]["uid"])
            await backend.close()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-kube-") as tmp:
        workdir = Path(tmp)
        with sandbox_clusters(workdir, args.only) as sandbox:
            async with make_bus(args.memory_bus, args.bootstrap, workdir) as (bus, broker_pid):
                result = await run(args, sandbox, bus, broker_pid)
            if args.ceiling:
                compare_with_ceiling(
                    result,
                    await probe_without_trainhub(
                        sandbox,
                        {n: c["jobs"] for n, c in result["clusters"].items()},
                        args.pods,
                        args.duration,
                    ),
                )
            if args.probe:
                result["apiserver_pod_creates_per_s_alone"] = await probe_create_rates(
                    sandbox, args.probe
                )
            return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=60, help="M: jobs submitted at once")
    parser.add_argument("--pods", type=int, default=10, help="K: pods per job")
    parser.add_argument("--duration", default="2s", help="how long each pod runs (KWOK)")
    parser.add_argument("--memory-bus", action="store_true", help="in-memory bus, no broker")
    parser.add_argument(
        "--serial-submit",
        action="store_true",
        help="submit one job after another, each once the previous is acknowledged (the pace "
        "then depends on the broker's round trip in a busy process)",
    )
    parser.add_argument("--bootstrap", help="an existing broker instead of a sandbox one")
    parser.add_argument("--heartbeat-interval", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--probe",
        type=int,
        default=150,
        help="pods per cluster for the apiserver-alone create probe after the run (0: none)",
    )
    parser.add_argument(
        "--no-ceiling",
        dest="ceiling",
        action="store_false",
        help="skip re-running the same work without trainhub after the run",
    )
    parser.add_argument(
        "--only",
        choices=[spec.name for spec in CLUSTERS],
        help="start only this cluster: every job goes to it, and the machine is not shared "
        "with the other two clusters' control planes",
    )
    parser.add_argument("--output", type=Path, default=RESULTS / "kube.json")
    return parser.parse_args(argv)


if __name__ == "__main__":
    setup_logging()  # trainhub's filters: aiokafka's self-retried errors are not failures
    arguments = parse_args()
    result = asyncio.run(main(arguments))
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(result, indent=2) + "\n")
    json.dump(result, sys.stdout, indent=2)
    print()
