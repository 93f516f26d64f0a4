"""What the hub puts on the bus per job, and the ledger's phase index it schedules from."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

from bus.dead_letters import dead_letter_reason
from bus.events import events_to_end, publish_event
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from dispatcher.ledger import JobRecord, Ledger
from dispatcher.placement import Placement
from dispatcher.placement_config import PlacementConfig
from schemas.cluster import ClusterPolicy
from schemas.events import EventType, JobAssigned, JobStatusUpdate, JobSubmitted, make_event
from schemas.job_parsing import parse_job
from schemas.kubeflow import AnyJob
from schemas.run_policy import TRAINHUB_MANAGER
from schemas.status import JobPhase, JobStatus
from tests.helpers import (
    cluster,
    jax_job,
    node,
    publish_heartbeat,
    publish_report,
    until,
    with_host_port,
)
from trainhub.producer import submit_document


@asynccontextmanager
async def _started_hub(prefix: str) -> AsyncIterator[tuple[MemoryBus, Topics, Hub]]:
    """A started bus and hub (a pass every 50 ms); the hub is stopped on leaving, the bus
    left open to read."""
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix=prefix)
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await hub.start()
    try:
        yield bus, topics, hub
    finally:
        await hub.stop()


@asynccontextmanager
async def _hub_beside_roomy_east(prefix: str) -> AsyncIterator[tuple[MemoryBus, Topics, Hub]]:
    """`_started_hub` that has heard from one roomy cluster, east."""
    async with _started_hub(prefix) as (bus, topics, hub):
        roomy = cluster("east", node("n1", cpu="64", memory="256Gi", pods="110"))
        await publish_heartbeat(bus, topics, roomy)
        yield bus, topics, hub


async def test_each_job_gets_one_assignment_after_its_assigned_status() -> None:
    async with _hub_beside_roomy_east("traffic") as (bus, topics, hub):
        uids = [await submit_document(bus, topics, jax_job(f"t-{i}")) for i in range(6)]
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == len(uids))
        await bus.flush()
    assignments = [
        e
        async for e in events_to_end(bus, topics.assignments("east"))
        if e.type == EventType.JOB_ASSIGNED
    ]
    assert sorted(e.subject or "" for e in assignments) == sorted(uids)
    statuses = [e.data_as(JobStatusUpdate) async for e in events_to_end(bus, topics.status)]
    phases: dict[str, list[JobPhase]] = {}
    for update in statuses:
        phases.setdefault(update.uid, []).append(update.phase)
    assert all(phases[uid] == [JobPhase.QUEUED, JobPhase.ASSIGNED] for uid in uids), phases
    # The Queued status carries the document; the Assigned one does not repeat it.
    assert all((u.job is not None) == (u.phase == JobPhase.QUEUED) for u in statuses), statuses


def test_ledger_index_follows_phase_changes_and_replacements() -> None:
    ledger = Ledger()
    first = JobRecord(uid="a", phase=JobPhase.QUEUED)
    second = JobRecord(uid="b", phase=JobPhase.QUEUED)
    ledger.put(first)
    ledger.put(second)
    assert ledger.in_phase(JobPhase.QUEUED) == [first, second]
    first.assign("east")
    assert ledger.in_phase(JobPhase.QUEUED) == [second]
    assert ledger.in_phase(JobPhase.ASSIGNED, JobPhase.RUNNING) == [first]
    assert ledger.count(JobPhase.QUEUED, JobPhase.ASSIGNED) == 2
    # A record replaced under the same uid leaves the index; changes to the old one no
    # longer count.
    replacement = JobRecord(uid="a", phase=JobPhase.RUNNING)
    ledger.put(replacement)
    first.enqueue()
    assert ledger.in_phase(JobPhase.ASSIGNED) == []
    assert ledger.in_phase(JobPhase.QUEUED) == [second]
    assert ledger.in_phase(JobPhase.RUNNING) == [replacement]
    assert len(ledger.all()) == 2


def test_ledger_compacts_only_records_still_finished_and_still_held() -> None:
    ledger = Ledger()
    job = parse_job(jax_job("a"))
    finished, replaced, resumed = (JobRecord.of(job, JobPhase.RUNNING) for _ in range(3))
    finished.uid, replaced.uid, resumed.uid = "finished", "replaced", "resumed"
    for record in (finished, replaced, resumed):
        ledger.put(record)
        record.finish(JobPhase.SUCCEEDED)
    # A deleted job submitted again is a new record under the same uid; a record can also
    # leave a finished phase (Deleted -> Queued on resubmission) before the compaction.
    successor = JobRecord.of(job, JobPhase.QUEUED)
    successor.uid = "replaced"
    ledger.put(successor)
    resumed.enqueue()
    assert ledger.compact_finished() == 1
    assert finished.job is None and finished.managed_by == TRAINHUB_MANAGER
    assert replaced.job is not None and successor.job is not None and resumed.job is not None
    assert ledger.compact_finished() == 0


async def test_running_before_the_heartbeat_does_not_free_the_capacity_twice() -> None:
    """A worker's Running can arrive before the heartbeat that counts the job's pods: the
    reservation must hold until that heartbeat, or a second job lands on the same room."""
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="race")
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await hub.start()

    async def heartbeat(requested: dict[str, str] | None, jobs: list[str]) -> None:
        snapshot = cluster("east", node("n1", requested, cpu="4", memory="8Gi"), jobs=jobs)
        event = make_event(EventType.CLUSTER_HEARTBEAT, "worker/east", "east", snapshot)
        await publish_report(bus, topics, "east", "east", event)

    async def worker_says(uid: str, phase: JobPhase, sequence: int) -> None:
        update = JobStatusUpdate(uid=uid, phase=phase, cluster="east", attempt=1, sequence=sequence)
        event = make_event(EventType.JOB_STATUS, "worker/east", uid, update)
        await publish_report(bus, topics, "east", uid, event)

    try:
        await heartbeat(None, [])
        first = await submit_document(bus, topics, jax_job("first", workers=2, cpu="2"))
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == 1)
        await worker_says(first, JobPhase.RUNNING, 1)
        await until(
            lambda: (r := hub.ledger.get(first)) is not None and r.phase == JobPhase.RUNNING
        )
        second = await submit_document(bus, topics, jax_job("second", workers=2, cpu="2"))
        await until(
            lambda: (
                (r := hub.ledger.get(second)) is not None
                and r.message is not None
                and "capacity" in r.message
            )
        )
        record = hub.ledger.get(second)
        assert record is not None and record.phase == JobPhase.QUEUED, record
        # The heartbeat that counts the first job's pods takes over from the reservation.
        await heartbeat({"cpu": "4", "memory": "2Gi"}, [first])
        await until(lambda: hub.reservations.count("east") == 0)
        assert hub.ledger.get(second).phase == JobPhase.QUEUED  # type: ignore[union-attr]
        # The first job ends and its pods go: now the second one fits.
        await worker_says(first, JobPhase.SUCCEEDED, 2)
        await heartbeat(None, [])
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == 1)
        assert hub.ledger.get(second).phase == JobPhase.ASSIGNED  # type: ignore[union-attr]
    finally:
        await hub.stop()


async def test_a_restarted_hub_keeps_the_host_ports_a_placed_job_holds() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="ports")
    first = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await first.start()
    nodes = node("n1", cpu="4", memory="8Gi"), node("n2", cpu="4", memory="8Gi")
    snapshot = cluster("east", *nodes, policy=ClusterPolicy(allowHostPorts=True))
    await publish_heartbeat(bus, topics, snapshot)
    # Two pods of 1 cpu holding port 7070: one on each node, though one node has room for both.
    uid = await submit_document(bus, topics, with_host_port(jax_job("held", cpu="1"), 7070))
    await until(lambda: first.ledger.count(JobPhase.ASSIGNED) == 1)
    await first.stop()

    second = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await second.start()
    try:
        record = second.ledger.get(uid)
        assert record is not None and record.phase == JobPhase.ASSIGNED
        assert second.reservations.count("east") == 1
        # Both nodes' port 7070 is taken until the heartbeat shows the job: a pod wanting it
        # waits, with 6 cpu free; one on another port is placed.
        late = await submit_document(
            bus, topics, with_host_port(jax_job("late", workers=1, cpu="1"), 7070)
        )
        other = await submit_document(
            bus, topics, with_host_port(jax_job("other", workers=1, cpu="1"), 7071)
        )
        await until(lambda: second.ledger.count(JobPhase.ASSIGNED) == 2)
        assert second.ledger.get(other).phase == JobPhase.ASSIGNED  # type: ignore[union-attr]
        waiting = second.ledger.get(late)
        assert waiting is not None and waiting.phase == JobPhase.QUEUED
    finally:
        await second.stop()


async def test_a_restarted_hub_keeps_the_reservation_of_a_job_no_heartbeat_counts_yet() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="rebuilt")
    first = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await first.start()
    snapshot = cluster("east", node("n1", cpu="4", memory="8Gi"))
    await publish_heartbeat(bus, topics, snapshot)
    uid = await submit_document(bus, topics, jax_job("held", workers=2, cpu="2"))
    await until(lambda: first.ledger.count(JobPhase.ASSIGNED) == 1)
    running = JobStatusUpdate(
        uid=uid, phase=JobPhase.RUNNING, cluster="east", attempt=1, sequence=1
    )
    await publish_report(
        bus, topics, "east", uid, make_event(EventType.JOB_STATUS, "worker/east", uid, running)
    )
    await until(lambda: first.ledger.count(JobPhase.RUNNING) == 1)
    await first.stop()

    second = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await second.start()
    try:
        record = second.ledger.get(uid)
        assert record is not None and record.phase == JobPhase.RUNNING
        # The last heartbeat predates the job's pods: its room stays taken.
        assert second.reservations.count("east") == 1
        late = await submit_document(bus, topics, jax_job("late", workers=1, cpu="2"))
        await until(
            lambda: (
                (r := second.ledger.get(late)) is not None
                and r.reason in ("WaitingForCapacity", "Assigned")
            )
        )
        assert second.ledger.get(late).phase == JobPhase.QUEUED  # type: ignore[union-attr]
    finally:
        await second.stop()


async def test_a_finished_job_is_kept_as_a_summary_and_still_refuses_resubmissions() -> None:
    """A long-running hub must not hold every job it ever ran in full: once finished, a
    record keeps its summary, and what it answers to resubmissions does not change."""

    async def worker_says(uid: str, phase: JobPhase, sequence: int) -> None:
        update = JobStatusUpdate(uid=uid, phase=phase, cluster="east", attempt=1, sequence=sequence)
        event = make_event(EventType.JOB_STATUS, "worker/east", uid, update)
        await publish_report(bus, topics, "east", uid, event)

    async with _hub_beside_roomy_east("compact") as (bus, topics, hub):
        done = await submit_document(bus, topics, jax_job("done"))
        running = await submit_document(bus, topics, jax_job("running"))
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == 2)
        for uid in (done, running):
            await worker_says(uid, JobPhase.RUNNING, 1)
        await worker_says(done, JobPhase.SUCCEEDED, 2)
        await until(lambda: (r := hub.ledger.get(done)) is not None and r.job is None)
        record = hub.ledger.get(done)
        assert record is not None
        assert (record.phase, record.cluster, record.attempt) == (JobPhase.SUCCEEDED, "east", 1)
        assert (record.name, record.namespace, record.kind) == ("done", "default", "JAXJob")
        assert record.managed_by == TRAINHUB_MANAGER
        assert record.decision is None and record._document is None
        other = hub.ledger.get(running)
        assert other is not None and other.job is not None and other.decision is not None
        # The same job again is refused as a duplicate, and with another manager as an
        # attempt to change runPolicy.managedBy, exactly as before the record was compacted.
        await submit_document(bus, topics, jax_job("done"))
        await submit_document(bus, topics, jax_job("done", managed=False))
        await until(lambda: len(bus.records(topics.dead_letters)) == 1)
        reason = dead_letter_reason(bus.records(topics.dead_letters)[0]) or ""
        assert "managedBy is immutable" in reason and "trainhub.io/dispatcher" in reason
        await bus.flush()
    updates = [e.data_as(JobStatusUpdate) async for e in events_to_end(bus, topics.status)]
    answers = [u for u in updates if u.uid == done and u.reason == "AlreadyExists"]
    assert [a.phase for a in answers] == [JobPhase.SUCCEEDED] * 2
    # The second producer hears why too (its watcher waited for ever on a dead letter alone).
    assert "managedBy is immutable" in (answers[1].message or "")
    assert answers[0].submission != answers[1].submission
    # The decision was published with the placement before the record let go of it.
    assigned = [u for u in updates if u.uid == done and u.phase == JobPhase.ASSIGNED]
    assert assigned and assigned[0].placement is not None
    assert assigned[0].placement.chosen == "east"


async def test_the_assignment_names_the_chosen_cluster_and_the_status_the_best_and_counts() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="scores")
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await hub.start()
    try:
        for name, cpu in (("east", "64"), ("west", "8"), ("tiny", "1")):
            snapshot = cluster(name, node("n1", cpu=cpu, memory="256Gi", pods="110"))
            await publish_heartbeat(bus, topics, snapshot)
        await until(lambda: len(hub.clusters.all()) == 3)
        uid = await submit_document(bus, topics, jax_job("spread", cpu="2"))
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == 1)
        await bus.flush()
    finally:
        await hub.stop()
    updates = [e.data_as(JobStatusUpdate) async for e in events_to_end(bus, topics.status)]
    status = next(u for u in updates if u.phase == JobPhase.ASSIGNED)
    assert status.placement is not None and status.placement.chosen == "east"
    # The feasible clusters with their scores; the rejected one counted by its reason's kind.
    scores = {c.name: c for c in status.placement.clusters}
    assert set(scores) == {"east", "west"} and scores["west"].feasible
    assert (status.placement.considered, status.placement.feasible) == (3, 2)
    assert status.placement.rejected == {"too small for the job": 1}
    [assignment] = [
        e.data_as(JobAssigned)
        async for e in events_to_end(bus, topics.assignments("east"))
        if e.type == EventType.JOB_ASSIGNED
    ]
    assert assignment.uid == uid and assignment.placement is not None
    assert assignment.placement.chosen == "east"
    assert assignment.placement.clusters == [scores["east"]]


async def test_a_status_message_counts_the_reasons_and_names_ten_clusters() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="many")
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await hub.start()
    names = [f"c{i:02d}" for i in range(12)]
    try:
        for name in names:
            snapshot = cluster(name, node("n1", cpu="4", memory="16Gi", pods="110"))
            await publish_heartbeat(bus, topics, snapshot)
        await until(lambda: len(hub.clusters.all()) == len(names))
        uid = await submit_document(bus, topics, jax_job("huge", workers=1, cpu="64"))
        await until(lambda: hub.ledger.count(JobPhase.REJECTED) == 1)
        await bus.flush()
    finally:
        await hub.stop()
    updates = [e.data_as(JobStatusUpdate) async for e in events_to_end(bus, topics.status)]
    [rejected] = [u for u in updates if u.uid == uid and u.phase == JobPhase.REJECTED]
    message = rejected.message or ""
    assert all(f"{name}: can never fit" in message for name in names[:10]), message
    assert "c10:" not in message and "c11:" not in message
    assert message.startswith(
        "the job fits no registered cluster: 0/12 clusters can take the job now; "
        "12 too small for the job (c00: can never fit"
    ), message
    assert message.endswith("; and 2 more clusters)")
    decision = rejected.placement
    assert decision is not None and decision.rejected == {"too small for the job": 12}
    assert [c.name for c in decision.clusters] == names[:10]
    assert all(c.reason and "can never fit" in c.reason for c in decision.clusters)


async def test_a_waiting_job_is_not_republished_for_every_capacity_change() -> None:
    """Free amounts move with every heartbeat, and with them the waiting reason: the hub
    publishes the first reason at once and a changed one only after the interval, so many
    waiting jobs on many clusters do not make a status per job per pass."""
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="waiting")
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05, waiting_status_interval=3600))
    await hub.start()

    async def beat(taken: int) -> None:
        snapshot = cluster(
            "east", node("n1", {"cpu": str(taken)}, cpu="8", memory="64Gi", pods="110")
        )
        await publish_heartbeat(bus, topics, snapshot)

    def reason_now(uid: str) -> str:
        record = hub.ledger.get(uid)
        decision = record.decision if record is not None else None
        return (decision.clusters[0].reason or "") if decision and decision.clusters else ""

    async def waiting_messages(uid: str) -> list[str]:
        await bus.flush()
        return [
            u.message or ""
            async for e in events_to_end(bus, topics.status)
            if (u := e.data_as(JobStatusUpdate)).uid == uid and u.reason == "WaitingForCapacity"
        ]

    try:
        await beat(3)
        await until(lambda: len(hub.clusters.all()) == 1)
        uid = await submit_document(bus, topics, jax_job("waits", workers=1, cpu="6"))
        await until(lambda: "most on one node 5" in reason_now(uid))
        for taken in (4, 5, 4, 5, 4):
            await beat(taken)
            await until(functools.partial(_says, reason_now, uid, f"most on one node {8 - taken}"))
        first = await waiting_messages(uid)
        assert len(first) == 1 and "most on one node 5" in first[0], first
        # Once the last reason has stood long enough, the newest one goes out.
        hub.config.waiting_status_interval = 0.0
        await until(
            lambda: (r := hub.ledger.get(uid)) is not None and "node 4" in (r.message or "")
        )
        both = await waiting_messages(uid)
        assert len(both) == 2 and "most on one node 4" in both[1], both
        record = hub.ledger.get(uid)
        assert record is not None and record.phase == JobPhase.QUEUED
    finally:
        await hub.stop()


async def test_a_pass_plans_a_backlog_of_look_alike_jobs_once_per_shape() -> None:
    """Once a job found no room in a pass, the later jobs of its shape that avoid the same
    clusters get its decision unplanned; other shapes and other exclusions are planned."""
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="backlog")
    await bus.create_topics(topics.shared_specs())
    hub = Hub(bus, topics, HubConfig())
    hub.clusters.update(cluster("east", node("n1", cpu="8", memory="64Gi", pods="110")))
    planned: list[str] = []
    plan = hub.scheduling.plan

    def counted(job: AnyJob, excluded: frozenset[str] = frozenset()) -> Placement:
        planned.append(job.metadata.name)
        return plan(job, excluded)

    hub.scheduling.plan = counted  # type: ignore[method-assign]
    jobs = [jax_job(f"big-{i}", workers=1, cpu="6") for i in range(5)]
    jobs.append(jax_job("small", workers=1, cpu="1"))
    records = [JobRecord.of(parse_job(document), JobPhase.QUEUED) for document in jobs]
    records[4].excluded = {"west": time.monotonic() + 600}
    for record in records:
        hub.ledger.put(record)
    placed = await hub.schedule_pending()
    assert [r.name for r in placed] == ["big-0", "small"]
    assert planned == ["big-0", "big-1", "big-4", "small"]
    for record in records[1:5]:
        assert record.phase == JobPhase.QUEUED and record.reason == "WaitingForCapacity"
        assert record.decision is not None and record.decision.chosen is None
        assert "most on one node 2" in (record.decision.clusters[0].reason or "")


async def test_a_restarted_hub_deletes_a_job_whose_ttl_ran_out_by_its_completion_time() -> None:
    """ttlSecondsAfterFinished counts from the job's completionTime, wall-clock: a hub
    rebuilt from the status topic deletes the job when that time comes, once."""
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="ttl")
    first = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await first.start()
    snapshot = cluster("east", node("n1", cpu="64", memory="256Gi", pods="110"))
    await publish_heartbeat(bus, topics, snapshot)
    document = jax_job("brief", workers=1)
    document["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 3600
    uid = await submit_document(bus, topics, document)
    try:
        await until(lambda: first.ledger.count(JobPhase.ASSIGNED) == 1)
        # Finished almost an hour ago: the hour is up two seconds from now.
        completed = datetime.now(UTC) - timedelta(seconds=3598)
        done = JobStatusUpdate(
            uid=uid,
            phase=JobPhase.SUCCEEDED,
            cluster="east",
            attempt=1,
            sequence=1,
            status=JobStatus(completionTime=completed),
        )
        event = make_event(EventType.JOB_STATUS, "worker/east", uid, done)
        await publish_report(bus, topics, "east", uid, event)
        await until(lambda: first.ledger.count(JobPhase.SUCCEEDED) == 1)
    finally:
        await first.stop()
    second = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await second.start()
    try:
        assert second.ledger.get(uid).phase == JobPhase.SUCCEEDED  # type: ignore[union-attr]
        await until(lambda: second.ledger.count(JobPhase.DELETED) == 1, timeout=10)
        assert datetime.now(UTC) >= completed + timedelta(seconds=3600)
        await bus.flush()
    finally:
        await second.stop()
    deleted = [
        u
        async for e in events_to_end(bus, topics.status)
        if (u := e.data_as(JobStatusUpdate)).phase == JobPhase.DELETED
    ]
    assert len(deleted) == 1 and "ttlSecondsAfterFinished (3600s)" in (deleted[0].message or "")
    [revoked] = [
        e
        async for e in events_to_end(bus, topics.assignments("east"))
        if e.type == EventType.JOB_REVOKED
    ]
    assert revoked.subject == uid


async def test_an_invalid_resubmission_leaves_the_job_of_that_name_alone() -> None:
    """An invalid document naming a job that exists is refused as that submission's answer:
    no Rejected status under the job's uid, which every reader (and a restarted hub) would
    take as the end of the running job."""
    async with _hub_beside_roomy_east("invalid-again") as (bus, topics, hub):
        uid = await submit_document(bus, topics, jax_job("taken"))
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == 1)
        invalid = jax_job("taken")
        invalid["apiVersion"] = "kubeflow.org/v9"
        event = make_event(EventType.JOB_SUBMITTED, "test", uid, JobSubmitted(job=invalid))
        await publish_event(bus, topics.jobs, uid, event)
        await bus.flush()

        # The refusal is published before the record is dead-lettered.
        await until(lambda: bool(bus.records(topics.dead_letters)))
        await bus.flush()
        answered = [
            u
            async for e in events_to_end(bus, topics.status)
            if (u := e.data_as(JobStatusUpdate)).submission == event.id
        ]
        [answer] = answered
        assert answer.uid == uid and answer.reason == "AlreadyExists"
        assert answer.phase == JobPhase.ASSIGNED, answer
        assert "also invalid: apiVersion" in (answer.message or "")
        reasons = [dead_letter_reason(r) or "" for r in bus.records(topics.dead_letters)]
        assert any("kubeflow.org/v9" in reason for reason in reasons), reasons
        assert hub.ledger.get(uid).phase == JobPhase.ASSIGNED  # type: ignore[union-attr]
    restarted = Hub(bus, topics, HubConfig(schedule_interval=0.05))
    await restarted.start()
    try:
        assert restarted.ledger.get(uid).phase == JobPhase.ASSIGNED  # type: ignore[union-attr]
    finally:
        await restarted.stop()


async def test_the_placer_keeps_only_what_it_read_from_jobs_still_waiting() -> None:
    # A kept profile holds the parsed job: one kept past its placement pinned the document
    # of every recent job in the hub's memory, whatever the ledger let go of.
    async with _hub_beside_roomy_east("profiles") as (bus, topics, hub):
        placed = [await submit_document(bus, topics, jax_job(f"p-{i}")) for i in range(5)]
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == len(placed))
        big = await submit_document(bus, topics, jax_job("big", workers=1, cpu="50"))
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == len(placed) + 1)
        waiting = await submit_document(bus, topics, jax_job("waits", workers=1, cpu="50"))
        await until(lambda: (r := hub.ledger.get(waiting)) is not None and r.reason != "Queued")
        await hub.schedule_pending()
        record = hub.ledger.get(waiting)
        assert record is not None and record.phase == JobPhase.QUEUED
        assert hub.placer.held == 1  # the waiting job's, read again on every pass
        big_record = hub.ledger.get(big)
        assert big_record is not None and big_record.phase == JobPhase.ASSIGNED


async def test_a_job_admitted_during_a_pass_keeps_what_the_placer_read_on_admission() -> None:
    # Under load, jobs are admitted while a pass awaits its status sends; their profiles,
    # read on admission, used to be dropped at the end of that pass and read again (nearly
    # every job read twice on a busy hub).
    async with _started_hub("profiles-mid-pass") as (bus, topics, hub):
        first = await submit_document(bus, topics, jax_job("first", workers=1))
        await until(lambda: (r := hub.ledger.get(first)) is not None and r.reason != "Queued")
        arriving = parse_job(jax_job("arriving", workers=1))
        note_waiting = hub.scheduling.note_waiting

        async def admit_meanwhile(record: JobRecord, reasons: str, why: str) -> None:
            if hub.ledger.get(arriving.uid) is None:
                await hub.intake.admit(arriving, "submission-of-arriving")
            await note_waiting(record, reasons, why)

        hub.scheduling.note_waiting = admit_meanwhile  # type: ignore[method-assign]
        await hub.schedule_pending()  # no cluster: both wait
        record = hub.ledger.get(arriving.uid)
        assert record is not None and record.phase == JobPhase.QUEUED
        assert hub.placer.held == 2


async def test_malformed_constraints_are_rejected_at_once_not_as_a_misfit() -> None:
    # Invalid whatever the clusters: said on admission, with no cluster registered at all,
    # as "Invalid" (it read "the job fits no registered cluster" once clusters existed).
    async with _started_hub("malformed") as (bus, topics, hub):
        affinity = jax_job("affinity", workers=1)
        affinity["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"] = {
            "nodeAffinity": "garbage"
        }
        selector = jax_job("selector", workers=1)
        selector["metadata"]["annotations"] = {"trainhub.io/cluster-selector": "region in (("}
        empty = jax_job("empty", workers=1)
        empty["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] = 0
        uids = [await submit_document(bus, topics, d) for d in (affinity, selector, empty)]
        await until(lambda: len(bus.records(topics.dead_letters)) == 3)
        await bus.flush()
        updates = [e.data_as(JobStatusUpdate) async for e in events_to_end(bus, topics.status)]
        for uid, fragment in zip(
            uids,
            ("nodeAffinity: must be a mapping", "trainhub.io/cluster-selector", "0 replicas"),
            strict=True,
        ):
            (update,) = [u for u in updates if u.uid == uid]
            assert (update.phase, update.reason) == (JobPhase.REJECTED, "Invalid")
            assert fragment in (update.message or ""), update.message
            assert hub.ledger.get(uid) is None  # nothing kept: it can be fixed and sent again


def _says(reason_now: Callable[[str], str], uid: str, text: str) -> bool:
    return text in reason_now(uid)


async def test_jobs_a_queue_holds_back_are_not_republished_at_every_pass() -> None:
    """A held job's reason counts the queue's jobs in flight and offered in the pass, which
    move at every pass: like a job waiting for capacity, it is published at once, and a
    changed reason only after the interval."""
    placement = PlacementConfig.from_dict({"queue_limits": {"qa": 1}})
    config = HubConfig(schedule_interval=0.02, placement=placement, waiting_status_interval=3600)
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="held")
    hub = Hub(bus, topics, config)
    await hub.start()
    try:
        await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="64", memory="256Gi")))
        uids = []
        for index in range(6):
            doc = jax_job(f"held-{index}", workers=1)
            doc["spec"]["runPolicy"]["schedulingPolicy"] = {"queue": "qa"}
            uids.append(await submit_document(bus, topics, doc))
        await until(lambda: hub.ledger.count(JobPhase.ASSIGNED) == 1)
        await asyncio.sleep(0.5)  # some 25 passes
        await bus.flush()
        held = [
            u
            async for e in events_to_end(bus, topics.status)
            if (u := e.data_as(JobStatusUpdate)).reason == "WaitingForQueue"
        ]
        assert len({u.uid for u in held}) == 5
        assert len(held) == 5, [u.message for u in held]
    finally:
        await hub.stop()
