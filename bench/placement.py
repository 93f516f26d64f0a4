"""Placement decisions per second, as the hub makes them, at 10, 100 and 1,000 clusters.

A decision is `Placer.plan` (filters, per-node gang fit, scores and the explanation of
every cluster) plus the hub's bookkeeping: reserve the chosen capacity, release it when the
job ends (jobs stay in flight until 60% of the fleet's cpu is taken, then the oldest ends).
Clusters are sim snapshots of 50 nodes (64 cpu, 256Gi, 110 pods each); jobs are JAXJobs
of 2-4 workers in two pod sizes (2 cpu/8Gi, 8 cpu/32Gi): six job shapes, as from a few
pipeline templates (`--sizes` adds more). Every cluster sends a heartbeat every 10 s
(`--heartbeat-interval`), its nodes' `requested` counting the jobs placed there, which
reconciles their reservations; building those snapshot objects is bus decoding and is left
out of the timing, while the reconcile and all placement derives from a new snapshot are in.

Time is this process's CPU time: the machine is shared, and other processes' load must not
count against placement. Heartbeats follow the same clock. The garbage collector is tuned as
`trainhub hub` tunes it (trainhub.processes.tune_gc), after the jobs are built.

Placement runs compiled where `make native` has built these sources (dispatcher/native.py;
TRAINHUB_NATIVE=0 runs plain Python); the run prints which.

`virtual_rate` (`--virtual-rate R`) makes the run deterministic, for counting instructions
(`python -m bench.placement_ab REV --instructions`): the clock that paces heartbeats and
judges their age advances 1/R s per decision instead of following the CPU.

`--host-port-share F` gives that share of the jobs a host port (one of three), so their
pods go one to a node and placement works on its copies of the snapshots with room for
ports (dispatcher/port_rooms.py); the fleet's heartbeats report the ports held per node.

Usage: python -m bench.placement [--clusters 10,100,1000] [--nodes 50] [--jobs N]
Writes bench/results/placement.json: [{"clusters", "nodes_per_cluster", "jobs",
"decisions_per_s"[, "host_port_share"]}, ...].
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.jobs import jax_job
from dispatcher import native
from dispatcher.gang_fit import Usage
from dispatcher.placement import Placer, VersionedReservations
from dispatcher.placement_config import PlacementConfig
from dispatcher.port_rooms import is_port_resource, port_of
from schemas.cluster import ClusterPolicy, ClusterSnapshot, NodeSnapshot
from schemas.job_parsing import parse_job
from schemas.kubeflow import AnyJob
from trainhub.processes import tune_gc

RESULTS = Path(__file__).parent / "results" / "placement.json"
NODE = {"cpu": Decimal(64), "memory": Decimal(256 * 2**30), "pods": Decimal(110)}
SIZES = (("2", "8Gi"), ("8", "32Gi"), ("1", "4Gi"), ("4", "16Gi"), ("16", "64Gi"))
"""Pod sizes (cpu, memory) of the job templates, t-shirt style."""
HOST_PORTS = (7000, 7001, 7002)
"""The host ports of the jobs that hold one (`--host-port-share`): one to a node each."""
HEARTBEAT_INTERVAL = 10.0
"""Seconds between two heartbeats of a cluster (CPU seconds of this run)."""
UTILISATION = 0.6
"""Jobs in flight at once, as a share of what the fleet could hold."""


def job_document(
    index: int, rng: random.Random, sizes: int = 2, host_port_share: float = 0.0
) -> dict[str, Any]:
    cpu, memory = rng.choice(SIZES[:sizes])
    document = jax_job(f"bench-{index}", rng.randint(2, 4), cpu, memory)
    # Drawn only when asked for, so the default mix stays the same job for job.
    if host_port_share and rng.random() < host_port_share:
        port = rng.choice(HOST_PORTS)
        spec = document["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]
        spec["containers"][0]["ports"] = [{"containerPort": port, "hostPort": port}]
    return document


class Fleet:
    """The clusters' side: what runs where, and the heartbeats that report it."""

    def __init__(self, clusters: int, nodes: int, observed_at: datetime | None = None) -> None:
        self.names = [f"c{i:04d}" for i in range(clusters)]
        self.nodes = nodes
        self.running: dict[str, dict[str, Usage]] = {name: {} for name in self.names}
        self.sequence = 0
        self.snapshots = {name: self.heartbeat(name, observed_at) for name in self.names}

    def heartbeat(self, cluster: str, observed_at: datetime | None = None) -> ClusterSnapshot:
        requested: dict[str, dict[str, Decimal]] = {}
        ports: dict[str, list[str]] = {}
        for usage in self.running[cluster].values():
            for node, amounts in usage.items():
                slot = requested.setdefault(node, {})
                for resource, amount in amounts.items():
                    if is_port_resource(resource):  # a port its pod holds, not an amount
                        ports.setdefault(node, []).append(port_of(resource))
                        continue
                    slot[resource] = slot.get(resource, Decimal(0)) + amount
        self.sequence += 1
        # model_construct: these values are known valid, and decoding is not what we measure.
        nodes = [
            NodeSnapshot.model_construct(
                name=f"{cluster}-n{i}",
                allocatable=NODE,
                requested=requested.get(f"{cluster}-n{i}", {}),
                labels={},
                taints=[],
                hostPorts=sorted(ports.get(f"{cluster}-n{i}", ())),
            )
            for i in range(self.nodes)
        ]
        return ClusterSnapshot(
            name=cluster,
            observedAt=observed_at or datetime.now(UTC),
            nodes=nodes,
            sequence=self.sequence,
            jobs=sorted(self.running[cluster]),
            # The host-port jobs' pods hold one, which baseline Pod Security refuses.
            policy=_HOST_PORTS_ALLOWED,
        )


_HOST_PORTS_ALLOWED = ClusterPolicy(allowHostPorts=True)


def run(
    clusters: int,
    nodes: int,
    jobs: int,
    sizes: int = 2,
    heartbeat_interval: float = HEARTBEAT_INTERVAL,
    seed: int = 7,
    virtual_rate: float | None = None,
    host_port_share: float = 0.0,
) -> dict[str, Any]:
    rng = random.Random(seed)
    documents = [job_document(i, rng, sizes, host_port_share) for i in range(jobs)]
    parsed: list[tuple[AnyJob, str]] = [(job, job.uid) for job in map(parse_job, documents)]
    epoch = datetime.now(UTC)
    fleet = Fleet(clusters, nodes, epoch if virtual_rate else None)
    placer = Placer(PlacementConfig())
    reservations = VersionedReservations()
    mean_cpu = sum(float(cpu) for cpu, _ in SIZES[:sizes]) / sizes
    capacity_jobs = clusters * nodes * float(NODE["cpu"]) / (3 * mean_cpu)
    window = max(1, int(capacity_jobs * UTILISATION))
    in_flight: deque[tuple[str, str]] = deque()
    # Heartbeats: every cluster once an interval, spread over the first interval.
    due: list[tuple[float, int]] = []
    if heartbeat_interval > 0:
        due = sorted((rng.random() * heartbeat_interval, i) for i in range(clusters))
    listed = [fleet.snapshots[n] for n in fleet.names]
    """The registry's view, kept sorted by name and updated in place."""
    assigned = heartbeats = 0
    elapsed = 0.0
    clock = 0.0
    """The heartbeats' clock: `elapsed`, or virtual time with `virtual_rate`."""
    now: datetime | None = None
    tune_gc()  # as the hub runs: what start-up built is out of the collector's sight
    started = time.process_time()
    for job, uid in parsed:
        if virtual_rate:
            now = epoch + timedelta(seconds=clock)
        placement = placer.plan(job, listed, reservations=reservations, now=now)
        if placement.chosen is not None:
            reservations.reserve(placement.chosen, uid, placement.usage)
            fleet.running[placement.chosen][uid] = placement.usage
            in_flight.append((placement.chosen, uid))
            assigned += 1
        while len(in_flight) > window:
            cluster, done = in_flight.popleft()
            fleet.running[cluster].pop(done, None)
            reservations.release(done)
        elapsed += time.process_time() - started
        clock = clock + 1 / virtual_rate if virtual_rate else elapsed
        fresh = []
        while due and due[0][0] <= clock:
            _, index = heapq.heappop(due)
            # Untimed: building the snapshot is bus decoding.
            fresh.append((index, fleet.heartbeat(fleet.names[index], now)))
        started = time.process_time()
        for index, snapshot in fresh:
            listed[index] = fleet.snapshots[snapshot.name] = snapshot
            reservations.reconcile(snapshot)
            heapq.heappush(due, (clock + heartbeat_interval, index))
            heartbeats += 1
    elapsed += time.process_time() - started
    rate = jobs / elapsed
    print(
        f"{clusters:5d} clusters x {nodes} nodes: {jobs} decisions in {elapsed:.2f}s "
        f"= {rate:,.0f}/s ({assigned} assigned, {heartbeats} heartbeats, "
        f"{1e6 / rate:.0f} us per decision)",
        flush=True,
    )
    result: dict[str, Any] = {
        "clusters": clusters,
        "nodes_per_cluster": nodes,
        "jobs": jobs,
        "decisions_per_s": round(rate, 1),
    }
    if host_port_share:
        result["host_port_share"] = host_port_share
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", default="10,100,1000")
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=0, help="per size (default: by size)")
    parser.add_argument(
        "--sizes", type=int, default=2, help="pod sizes in the job mix (x3 replica counts)"
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        default=HEARTBEAT_INTERVAL,
        help="seconds between heartbeats of one cluster; 0: none",
    )
    parser.add_argument(
        "--virtual-rate",
        type=float,
        default=None,
        help="deterministic: the heartbeats' clock advances 1/R s per decision",
    )
    parser.add_argument(
        "--host-port-share",
        type=float,
        default=0.0,
        help="share of jobs whose pods hold a host port (one of three), 0..1",
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    print(f"placement: {'compiled' if native.active() else 'plain Python'}", flush=True)
    results = []
    for clusters in (int(c) for c in args.clusters.split(",")):
        jobs = args.jobs or (20_000 if clusters <= 100 else 5_000)
        results.append(
            run(
                clusters,
                args.nodes,
                jobs,
                args.sizes,
                args.heartbeat_interval,
                virtual_rate=args.virtual_rate,
                host_port_share=args.host_port_share,
            )
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
