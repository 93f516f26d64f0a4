"""Fairness: priority first, queues take turns, FIFO inside a queue, in-flight limits."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.fairness import (
    FairnessConfig,
    QueueTurns,
    admission_order,
    in_flight_by_queue,
)
from dispatcher.hub import Hub, HubConfig
from dispatcher.ledger import JobRecord
from dispatcher.placement_config import PlacementConfig
from schemas.codec import decode_event
from schemas.events import JobStatusUpdate
from schemas.job_parsing import parse_job
from schemas.status import JobPhase
from tests.helpers import cluster, jax_job, node, publish_heartbeat, until
from trainhub.producer import submit_document


def record(
    name: str,
    at: float,
    queue: str | None = None,
    priority: str | None = None,
    phase: JobPhase = JobPhase.QUEUED,
) -> JobRecord:
    doc: dict[str, Any] = jax_job(name, workers=1)
    policy = {k: v for k, v in (("queue", queue), ("priorityClass", priority)) if v}
    if policy:
        doc["spec"]["runPolicy"]["schedulingPolicy"] = policy
    made = JobRecord.of(parse_job(doc), phase)
    made.queued_at = at
    return made


def names(order: list[tuple[JobRecord, str | None]]) -> list[str | None]:
    return [r.name for r, _ in order]


CONFIG = FairnessConfig(priority_classes={"high": 100, "low": -5})


def test_higher_priority_first_then_queues_take_turns_fifo_inside() -> None:
    records = [
        record("a1", 1, "a"),
        record("a2", 2, "a"),
        record("a3", 3, "a"),
        record("b1", 4, "b"),
        record("b2", 5, "b"),
        record("urgent", 9, "b", "high"),
        record("later", 0, None, "low"),
        record("d1", 6),
    ]
    order = admission_order(records, {}, CONFIG)
    assert names(order) == ["urgent", "a1", "b1", "d1", "a2", "b2", "a3", "later"]
    assert all(reason is None for _, reason in order)


def test_unknown_priority_classes_get_the_default() -> None:
    order = admission_order(
        [record("x", 1, priority="nobody-knows"), record("y", 2, priority="high")], {}, CONFIG
    )
    assert names(order) == ["y", "x"]


def test_turns_carry_over_between_passes_so_a_burst_cannot_starve_a_queue() -> None:
    turns = QueueTurns(FairnessConfig())
    burst = [record(f"a{i}", i, "a") for i in range(50)]
    late = record("b0", 100, "b")
    waiting = [*burst, late]
    placed: list[str | None] = []
    for _ in range(4):  # room for one job per pass
        first, _ = turns.order(waiting, waiting)[0]
        placed.append(first.name)
        turns.placed(first)
        waiting.remove(first)
    assert placed == ["a0", "b0", "a1", "a2"]


def test_queue_limits_hold_jobs_back_with_the_reason() -> None:
    config = FairnessConfig(queue_limits={"a": 2}, default_queue_limit=10)
    running = [
        record("r1", 0, "a", phase=JobPhase.RUNNING),
        record("s1", 0, "a", phase=JobPhase.SUSPENDED),
    ]
    done = [record("d1", 0, "a", phase=JobPhase.SUCCEEDED)]
    queued = [record("a1", 1, "a"), record("b1", 2, "b")]
    in_flight = in_flight_by_queue([*running, *done, *queued], config)
    assert in_flight == {"a": 2}
    order = admission_order(queued, in_flight, config)
    assert names(order) == ["b1", "a1"]
    assert order[0][1] is None
    assert order[1][1] == "queue 'a' is at its limit of 2 jobs in flight (2 running or assigned)"


def test_a_limit_counts_the_jobs_offered_in_the_same_pass() -> None:
    config = FairnessConfig(default_queue_limit=2)
    queued = [record(f"q{i}", i, "q") for i in range(4)]
    order = admission_order(queued, {"q": 1}, config)
    assert [(r.name, reason is None) for r, reason in order] == [
        ("q0", True),
        ("q1", False),
        ("q2", False),
        ("q3", False),
    ]
    # The reason says where the second slot went.
    assert order[1][1] == (
        "queue 'q' is at its limit of 2 jobs in flight (1 running or assigned, 1 offered in "
        "this pass)"
    )


async def test_a_queue_offers_its_jobs_in_submission_order_across_partitions() -> None:
    # Read from three partitions, the jobs reach the hub in an order of the partitions'
    # making; the queue (limit 1) must still offer a1, submitted first, before a2 and a3.
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="order")
    await bus.create_topics(topics.shared_specs())
    uids = {}
    for name in ("a1", "a2", "a3"):
        doc = jax_job(name, workers=1)
        doc["spec"]["runPolicy"]["schedulingPolicy"] = {"queue": "qa"}
        uids[name] = await submit_document(bus, topics, doc)
    partitions = {r.key: r.partition for r in bus.records(topics.jobs)}
    assert len(set(partitions.values())) > 1, "the jobs must be spread over partitions"
    placement = PlacementConfig.from_dict({"queue_limits": {"qa": 1}})
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05, placement=placement))
    await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="64", memory="256Gi")))
    await hub.start()
    try:
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == 1)
        record = hub.ledger.get(uids["a1"])
        assert record is not None and record.phase == JobPhase.ASSIGNED
    finally:
        await hub.stop()


def test_submission_time_orders_a_queue_whatever_the_reading_order() -> None:
    late, early = record("late", 1, "q"), record("early", 2, "q")
    late.submitted_at, early.submitted_at = 200.0, 100.0
    assert names(admission_order([late, early], {}, CONFIG)) == ["early", "late"]


async def test_statuses_name_the_queue_the_hub_counts_a_job_in() -> None:
    # A job naming no queue is counted in the configured default one, and its statuses say
    # so: readers need not guess the hub's default.
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="queues")
    await bus.create_topics(topics.shared_specs())
    named = jax_job("named", workers=1)
    named["spec"]["runPolicy"]["schedulingPolicy"] = {"queue": "research"}
    uids = {
        "named": await submit_document(bus, topics, named),
        "bare": await submit_document(bus, topics, jax_job("bare", workers=1)),
    }
    placement = PlacementConfig.from_dict({"default_queue": "batch"})
    registry = CollectorRegistry()
    config = HubConfig(schedule_interval=0.05, placement=placement)
    hub = Hub(bus, topics, config, registry=registry)
    await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="64", memory="256Gi")))
    await hub.start()
    try:
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == 2)
        # The metrics label it the same way.
        for queue in ("batch", "research"):
            labels = {"phase": "Assigned", "framework": "jax", "queue": queue, "cluster": "east"}
            assert registry.get_sample_value("trainhub_hub_jobs", labels) == 1
        assert registry.get_sample_value("trainhub_queue_length", {"queue": "batch"}) == 0
        assert registry.get_sample_value("trainhub_queue_length", {"queue": "default"}) is None
    finally:
        await hub.stop()
    queues: dict[str, set[str | None]] = {}
    for record in bus.records(topics.status):
        update = decode_event(record.headers, record.value).data_as(JobStatusUpdate)
        queues.setdefault(update.uid, set()).add(update.queue)
    assert queues[uids["named"]] == {"research"}
    assert queues[uids["bare"]] == {"batch"}
