"""A Kafka broker SIGKILLed mid-burst: submit -> Assigned while it is gone, and whether every
job still ends Succeeded exactly once.

A three-node KRaft cluster (trainhub_sandbox/kafka_cluster.py); a hub and two `sim` workers
as processes, all with `--replication 3` (topics with three replicas, min.insync.replicas 2).
This process offers `--jobs` one-second jobs at `--rate` per second; once `--kill-after` of
them are offered it SIGKILLs one node, keeps it down `--downtime` seconds and starts it again
while the offering goes on. The node is either `follower`: one that leads no partition 0 of
the jobs topic (nor the controller quorum), or `leader`: the one that does (as the cluster
metadata says just before; it may lead the quorum too).

Submit -> Assigned percentiles, from when each job was due at the offered rate (open loop: also
when the producer's `send` held the offering up) to its Assigned status's CloudEvent time, of
the jobs due while the node was gone (kill to back), and of those due before, for the ratio.
Exactly once: one Assigned, one run and one Succeeded status per job, and no other end.

Usage: python -m bench.broker_loss [--victim follower|leader|both] [--jobs 400] [--rate 20]
[--kill-after 60] [--downtime 12]. Writes bench/results/broker_loss.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from bench.hub_throughput import submit_document_nowait
from bench.jobs import jax_job
from bus.base import UnknownTopicError
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from schemas.events import CloudEvent, JobStatusUpdate
from schemas.job_parsing import job_uid_of
from schemas.sim_annotations import SIM_DURATION
from schemas.status import JobPhase
from tests.kafka.processes import Process, sim_worker
from tests.kafka.status_topic import read_status_events, runs_by_job, stop_all
from trainhub.logs import setup_logging
from trainhub_sandbox.kafka_broker import stop_kafka
from trainhub_sandbox.kafka_cluster import (
    KafkaCluster,
    active_controller,
    restart_node,
    start_kafka_cluster,
    stop_kafka_cluster,
)

RESULTS = Path(__file__).parent / "results" / "broker_loss.json"
REPLICATION = 3
Victim = Literal["follower", "leader"]


@dataclass(frozen=True)
class LossPlan:
    """One run: what to offer, whom to kill, for how long."""

    victim: Victim
    jobs: int = 400
    rate: float = 20.0
    kill_after: int = 60
    downtime: float = 12.0
    job_seconds: str = "1s"
    settle_timeout: float = 180.0


@dataclass
class LossRun:
    """What one run measured; `report()` is what the bench writes."""

    plan: LossPlan
    killed: int
    killed_led_jobs_0: bool
    killed_was_controller: bool
    """The killed node led the controller quorum (from the nodes' logs)."""
    jobs_0_leader_after: int | None
    outage_s: float
    longest_send_s: float
    """The longest the producer's `send` held the offering up (a partition without leader)."""
    submitted: dict[str, float]
    """When each job was due to be submitted (wall clock)."""
    assigned: dict[str, float]
    outage_window: tuple[float, float]
    final: dict[str, JobPhase] = field(default_factory=dict)
    assigned_count: Counter[str] = field(default_factory=Counter)
    succeeded_count: Counter[str] = field(default_factory=Counter)
    runs: dict[str, set[tuple[str | None, int]]] = field(default_factory=dict)
    topic_check: dict[str, Any] = field(default_factory=dict)
    logs: str = ""

    def waits_ms(self, start: float, end: float) -> list[float]:
        """Submit -> Assigned of the jobs submitted in [start, end), in ms, sorted."""
        return sorted(
            1000 * (self.assigned[uid] - at)
            for uid, at in self.submitted.items()
            if start <= at < end and uid in self.assigned
        )

    @property
    def not_succeeded_once(self) -> dict[str, str]:
        """Jobs that did not end Succeeded exactly once, each with what happened instead."""
        wrong: dict[str, str] = {}
        for uid in self.submitted:
            succeeded, assigned = self.succeeded_count[uid], self.assigned_count[uid]
            if self.final.get(uid) != JobPhase.SUCCEEDED or succeeded != 1:
                wrong[uid] = f"final {self.final.get(uid)}, {succeeded} Succeeded"
            elif assigned != 1 or len(self.runs.get(uid, ())) != 1:
                wrong[uid] = f"{assigned} Assigned, runs {sorted(self.runs.get(uid, ()))}"
        return wrong

    def report(self) -> dict[str, Any]:
        start, end = self.outage_window
        during = self.waits_ms(start, end)
        before = self.waits_ms(0.0, start)
        return {
            "victim": self.plan.victim,
            "killed_node": self.killed,
            "killed_led_jobs_partition_0": self.killed_led_jobs_0,
            "killed_active_controller": self.killed_was_controller,
            "jobs_partition_0_leader_after": self.jobs_0_leader_after,
            "outage_s": round(self.outage_s, 2),
            "longest_send_s": round(self.longest_send_s, 2),
            "jobs": len(self.submitted),
            "rate_per_s": self.plan.rate,
            "succeeded_exactly_once": len(self.submitted) - len(self.not_succeeded_once),
            "not_succeeded_exactly_once": len(self.not_succeeded_once),
            "submit_to_assigned_during_outage_ms": _percentiles(during),
            "submit_to_assigned_before_ms": _percentiles(before),
            "topics": self.topic_check,
        }


def _percentiles(waits: Sequence[float]) -> dict[str, float | int]:
    if not waits:
        return {"jobs": 0}
    return {
        "jobs": len(waits),
        "p50": round(statistics.median(waits), 1),
        "p99": round(waits[int(0.99 * (len(waits) - 1))], 1),
        "max": round(waits[-1], 1),
    }


def loss_job(name: str, seconds: str) -> dict[str, Any]:
    """A two-worker JAXJob whose sim pods run `seconds`."""
    document = jax_job(name, 2, "100m", "64Mi")
    template = document["spec"]["jaxReplicaSpecs"]["Worker"]["template"]
    template["metadata"] = {"annotations": {SIM_DURATION: seconds}}
    return document


async def partition_leader(settings: KafkaSettings, topic: str, partition: int = 0) -> int:
    """The node leading `partition` of `topic`, from the cluster metadata."""
    admin = AIOKafkaAdminClient(**settings.client_options())
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    for entry in described["partitions"]:
        if entry["partition"] == partition:
            return int(entry["leader"])
    raise LookupError(f"no partition {partition} of {topic} in {described}")


async def topic_replication(settings: KafkaSettings, topic: str) -> dict[str, Any]:
    """How `topic` is replicated: replicas and in-sync replicas per partition (from the
    metadata) and its `min.insync.replicas` (from its configuration)."""
    admin = AIOKafkaAdminClient(**settings.client_options())
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        (configs,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"min.insync.replicas": None})]
        )
    finally:
        await admin.close()
    resource = configs.resources[0]
    values = {entry[0]: entry[1] for entry in resource[4]}
    return {
        "replicas": sorted(len(p["replicas"]) for p in described["partitions"]),
        "isr": sorted(len(p["isr"]) for p in described["partitions"]),
        "min.insync.replicas": int(values["min.insync.replicas"]),
    }


async def _wait_until_placed(settings: KafkaSettings, topics: Topics, uid: str) -> None:
    """The warm-up job is Assigned: the hub runs, has heard the workers and has made its
    topics (the assignment topics on its first placement)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        events = await _status_events(settings, topics)
        if any(_update(e).uid == uid and _update(e).phase == JobPhase.ASSIGNED for e in events):
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the warm-up job {uid} was not Assigned within 120 s")


async def _status_events(settings: KafkaSettings, topics: Topics) -> list[CloudEvent]:
    try:
        return await read_status_events(settings, topics)
    except UnknownTopicError:  # the hub has not created it yet
        return []


def _update(event: CloudEvent) -> JobStatusUpdate:
    return event.data_as(JobStatusUpdate)


async def _offer(
    bus: KafkaBus, topics: Topics, plan: LossPlan, run: str, kill_now: asyncio.Event
) -> tuple[dict[str, float], float]:
    """Offer the jobs at the plan's rate; set `kill_now` after `kill_after` of them. Returns
    when each job was due (wall-clock seconds) and the longest a submission was held up.

    A job counts from when it was due, not from when its submission got through: the
    producer's `send` itself waits while a partition has no leader, and timing from after
    that wait would hide the outage from the very jobs it delayed (coordinated omission)."""
    due: dict[str, float] = {}
    held = 0.0
    start, wall_start = time.perf_counter(), time.time()
    for i in range(plan.jobs):
        delay = start + i / plan.rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        document = loss_job(f"loss-{run}-{i}", plan.job_seconds)
        before = time.perf_counter()
        await submit_document_nowait(bus, topics, document)
        held = max(held, time.perf_counter() - before)
        due[job_uid_of(document) or ""] = wall_start + i / plan.rate
        if i + 1 == plan.kill_after:
            kill_now.set()
    await bus.flush()
    return due, held


async def run_broker_loss(
    cluster: KafkaCluster, plan: LossPlan, logs: Path
) -> tuple[KafkaCluster, LossRun]:
    """One run on `cluster` (all nodes up); returns the cluster with the killed node
    restarted (its new PID) and what was measured."""
    settings = KafkaSettings(bootstrap=cluster.bootstrap)
    topics = Topics(prefix=f"loss-{plan.victim}-{uuid.uuid4().hex[:6]}", replication=REPLICATION)
    common = ["--bootstrap", settings.bootstrap, "--topic-prefix", topics.prefix]
    common += ["--replication", str(REPLICATION)]
    await asyncio.to_thread(logs.mkdir, parents=True, exist_ok=True)
    hub = Process(f"hub-{plan.victim}", ["hub", *common], logs)
    capacity = "cpu=1000,memory=4000Gi,nodes=10"
    workers = [sim_worker(name, common, logs, capacity=capacity) for name in ("east", "west")]
    processes = [hub, *workers]
    bus = KafkaBus(settings)
    await bus.start()
    offering: asyncio.Task[tuple[dict[str, float], float]] | None = None
    try:
        # As `trainhub submit` does: the producer may be first.
        await bus.create_topics(topics.shared_specs())
        run = uuid.uuid4().hex[:6]
        warmup = loss_job(f"warmup-{run}", plan.job_seconds)
        await submit_document_nowait(bus, topics, warmup)
        await bus.flush()
        await _wait_until_placed(settings, topics, job_uid_of(warmup) or "")
        topic_check = await topic_replication(settings, topics.jobs)

        leader = await partition_leader(settings, topics.jobs)
        controller = active_controller(cluster)
        if plan.victim == "leader":
            victim = leader
        else:
            # Neither the jobs' leader nor, where another node is left, the controller.
            others = [b.node_id for b in cluster.brokers if b.node_id != leader]
            victim = max(others, key=lambda node_id: (node_id != controller, node_id))
        kill_now = asyncio.Event()
        offering = asyncio.create_task(_offer(bus, topics, plan, run, kill_now))
        await kill_now.wait()
        killed_at = time.time()
        await asyncio.to_thread(stop_kafka, cluster.node(victim), timeout=0)
        await asyncio.sleep(plan.downtime)
        cluster = await asyncio.to_thread(restart_node, cluster, victim)
        back_at = time.time()
        leader_after = await partition_leader(settings, topics.jobs)
        submitted, held = await asyncio.wait_for(offering, 300)

        uids = set(submitted)
        deadline = time.monotonic() + plan.settle_timeout
        while True:
            events = await _status_events(settings, topics)
            updates = [_update(e) for e in events if _update(e).uid in uids]
            final = {u.uid: u.phase for u in updates}
            if sum(phase.finished for phase in final.values()) >= len(uids):
                break
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
        # A duplicate would come late, if at all: give it a moment to show.
        await asyncio.sleep(2.0)
        events = await _status_events(settings, topics)
        mine = [(e, _update(e)) for e in events if _update(e).uid in uids]
        updates = [u for _, u in mine]
        result = LossRun(
            plan=plan,
            killed=victim,
            killed_led_jobs_0=victim == leader,
            killed_was_controller=victim == controller,
            jobs_0_leader_after=leader_after,
            outage_s=back_at - killed_at,
            longest_send_s=held,
            submitted=submitted,
            assigned={u.uid: e.time.timestamp() for e, u in mine if u.phase == JobPhase.ASSIGNED},
            outage_window=(killed_at, back_at),
            final={u.uid: u.phase for u in updates},
            assigned_count=Counter(u.uid for u in updates if u.phase == JobPhase.ASSIGNED),
            succeeded_count=Counter(u.uid for u in updates if u.phase == JobPhase.SUCCEEDED),
            runs=dict(runs_by_job(updates)),
            topic_check=topic_check,
        )
        for process in processes:
            if process.popen.poll() is not None:
                raise RuntimeError(f"{process.name} exited:\n{process.log()[-3000:]}")
    finally:
        if offering is not None and not offering.done():
            offering.cancel()
            await asyncio.gather(offering, return_exceptions=True)
        await bus.close()
        stop_all(processes)
    result.logs = "\n".join(f"--- {p.name}\n{p.log()[-1500:]}" for p in processes)
    return cluster, result


async def main(victims: Sequence[Victim], plan: LossPlan) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-broker-loss-"))
    cluster = await asyncio.to_thread(start_kafka_cluster, workdir / "kafka", 3)
    report: dict[str, Any] = {
        "brokers": len(cluster.brokers),
        "replication": REPLICATION,
        "min_insync_replicas": Topics(replication=REPLICATION).min_insync,
        "machine_cores": os.cpu_count(),
        "measured": datetime.now().astimezone().isoformat(timespec="seconds"),
        "runs": [],
    }
    try:
        for victim in victims:
            cluster, result = await run_broker_loss(
                cluster, replace(plan, victim=victim), workdir / victim
            )
            report["runs"].append(result.report())
            print(json.dumps(result.report()), flush=True)
    finally:
        await asyncio.to_thread(stop_kafka_cluster, cluster)
    return report


if __name__ == "__main__":
    setup_logging()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--victim", choices=["follower", "leader", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=LossPlan.jobs)
    parser.add_argument("--rate", type=float, default=LossPlan.rate)
    parser.add_argument("--kill-after", type=int, default=LossPlan.kill_after)
    parser.add_argument("--downtime", type=float, default=LossPlan.downtime)
    args = parser.parse_args()
    chosen: list[Victim] = ["follower", "leader"] if args.victim == "both" else [args.victim]
    base = LossPlan("follower", args.jobs, args.rate, args.kill_after, args.downtime)
    result = asyncio.run(main(chosen, base))
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
