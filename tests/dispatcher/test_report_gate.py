"""One writer of the truth (issue 27 item 4), on the in-memory bus: a worker reports on its own
cluster's topic; the hub refuses what speaks for another cluster and passes on, under its own
epoch, only what it accepted. The same against a broker enforcing ACLs: tests/kafka/test_acls.py."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from bus.dead_letters import dead_letter_reason
from bus.epochs import EpochFence, record_epoch
from bus.events import events_to_end
from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from dispatcher.relay import RELAYED_BY
from schemas.codec import decode_event
from schemas.events import EventType, JobHandedBack, JobStatusUpdate, make_event
from schemas.status import JobPhase
from tests.helpers import cluster, jax_job, node, publish_heartbeat, publish_report, until
from trainhub.producer import read_clusters, submit_document


async def test_reports_for_another_cluster_are_refused_and_only_accepted_ones_passed_on() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="gate")
    registry = CollectorRegistry()
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05), registry=registry, epoch=7)
    await hub.start()
    try:
        await publish_heartbeat(bus, topics, cluster("east", node("n1", cpu="8", memory="16Gi")))
        await publish_heartbeat(bus, topics, cluster("west", node("n1", cpu="1", memory="1Gi")))
        uid = await submit_document(bus, topics, jax_job("target", workers=1, cpu="2"))
        await until(lambda: (r := hub.ledger.get(uid)) is not None and r.cluster == "east")
        record = hub.ledger.get(uid)
        assert record is not None

        def status(cluster_name: str, phase: JobPhase, sequence: int) -> object:
            update = JobStatusUpdate(
                uid=uid,
                phase=phase,
                cluster=cluster_name,
                attempt=record.attempt,
                sequence=sequence,
                reason=phase.value,
            )
            return make_event(EventType.JOB_STATUS, f"worker/{cluster_name}", uid, update)

        await publish_report(bus, topics, "east", uid, status("east", JobPhase.RUNNING, 1))
        await until(lambda: record.phase == JobPhase.RUNNING)
        # West's worker speaks for east three ways, and for east's job in its own name.
        back = JobHandedBack(uid=uid, cluster="east", attempt=record.attempt, reason="forged")
        forgeries = [
            (uid, status("east", JobPhase.FAILED, 9)),
            (uid, make_event(EventType.JOB_HANDED_BACK, "worker/west", uid, back)),
            (
                "east",
                make_event(
                    EventType.CLUSTER_HEARTBEAT,
                    "worker/west",
                    "east",
                    cluster("east", node("n1", cpu="1", memory="1Gi")),
                ),
            ),
        ]
        for key, event in forgeries:
            await publish_report(bus, topics, "west", key, event)
        await publish_report(bus, topics, "west", uid, status("west", JobPhase.FAILED, 10))

        def forged() -> float:
            value = registry.get_sample_value("trainhub_forged_reports_total", {"cluster": "west"})
            return value or 0.0

        await until(lambda: forged() == 3)
        reasons = [dead_letter_reason(r) or "" for r in bus.records(topics.dead_letters)]
        assert sum("forged report" in r and "gate.reports.west" in r for r in reasons) == 3
        assert record.phase == JobPhase.RUNNING and record.cluster == "east"
        east = hub.clusters.get("east")
        assert east is not None and east.nodes[0].allocatable["cpu"] == 8

        # The status topic: the hub's own statuses and east's Running, under epoch 7.
        await bus.flush()
        relayed = [
            r for r in bus.records(topics.status) if any(k == RELAYED_BY for k, _ in r.headers)
        ]
        assert [decode_event(r.headers, r.value).data["phase"] for r in relayed] == ["Running"]
        assert {record_epoch(r) for r in relayed} == {7}
        statuses = [
            e.data_as(JobStatusUpdate)
            async for e in events_to_end(bus, topics.status, keys={uid}, fence=EpochFence())
            if e.type == EventType.JOB_STATUS
        ]
        assert JobPhase.FAILED not in [u.phase for u in statuses]
        seen = await read_clusters(bus, topics)
        assert seen["east"].nodes[0].allocatable["cpu"] == 8
    finally:
        await hub.stop()
