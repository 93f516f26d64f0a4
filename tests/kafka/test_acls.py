"""SCRAM-SHA-512 users and ACLs end to end: hub, worker and producer each run as their own
user on a broker that allows nothing an ACL does not, with the ACLs of bus/kafka_acls.py."""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from bus.base import Subscription, TopicPartition
from bus.dead_letters import dead_letter_reason
from bus.events import events_to_end, publish_event
from bus.kafka import KafkaAuthorizationError, KafkaBus
from bus.kafka_acls import (
    ROLES,
    Operation,
    PatternType,
    ResourceType,
    Role,
    acl_tables_markdown,
    create_acls,
    role_acls,
    trainhub_acls,
)
from bus.kafka_settings import KafkaSettings
from bus.reading import records_to_end
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from schemas.events import EventType, JobStatusUpdate, make_event
from schemas.status import JobPhase
from tests.helpers import cluster, jax_job, node, publish_heartbeat, publish_report, until
from tests.kafka.processes import Process
from tests.kafka.status_topic import stop_all
from tests.kafka.topic_checks import topics_exist
from trainhub.producer import latest_status, read_clusters, submit_document
from trainhub_sandbox.kafka_broker import KafkaBroker, start_kafka, stop_kafka

README = Path(__file__).resolve().parents[2] / "README.md"
TOPICS = Topics(prefix="secure")
CLUSTER = "solo"
ADMIN = "trainhub-admin"
USERS: dict[Role, str] = {
    "hub": "trainhub-hub",
    "worker": "trainhub-worker",
    "producer": "trainhub-producer",
}
OTHER = "other"
OTHER_WORKER = "trainhub-worker-other"
"""The worker user of another cluster: what it can make anyone believe about `CLUSTER`."""
EARLIER_HUB = "trainhub-hub-earlier"
"""A hub user granted what the hub needed before it read the dead-letter topic at start."""


# -- the rules themselves (no broker) ------------------------------------------------------


def test_readme_tables_are_the_ones_role_acls_grants() -> None:
    assert acl_tables_markdown() in README.read_text(), (
        "README's ACL tables are stale; paste bus.kafka_acls.acl_tables_markdown() output"
    )


def test_each_role_gets_only_its_own_topics_and_groups() -> None:
    def grants(role: Role, clusters: list[str]) -> set[tuple[str, str, str, str]]:
        return {
            (r.resource_type.name, r.name, r.pattern.name, r.operation.name)
            for r in role_acls(role, TOPICS, clusters)
        }

    producer = grants("producer", [])
    assert producer == {
        ("TOPIC", "secure.jobs", "LITERAL", "WRITE"),
        ("TOPIC", "secure.status", "LITERAL", "READ"),
        ("TOPIC", "secure.clusters", "LITERAL", "READ"),
        ("TOPIC", "secure.runtimes", "LITERAL", "READ"),
    }
    worker = grants("worker", ["east"])
    assert ("TOPIC", "secure.assignments.east", "LITERAL", "READ") in worker
    assert ("GROUP", "secure-worker-east", "LITERAL", "READ") in worker
    assert not any("west" in name or name == "secure.jobs" for _, name, _, _ in worker)
    assert not any(op in ("READ", "CREATE") for _, n, _, op in worker if n == "secure.status")
    # One writer of the truth: a worker writes its own reports topic, never the shared ones.
    assert ("TOPIC", "secure.reports.east", "LITERAL", "WRITE") in worker
    assert not any(n in ("secure.status", "secure.clusters") for _, n, _, _ in worker)
    assert ("TOPIC", "secure.reports.", "PREFIXED", "READ") in grants("hub", [])
    assert ("TOPIC", "secure.clusters", "LITERAL", "WRITE") in grants("hub", [])
    hub = grants("hub", [])
    assert ("TOPIC", "secure.assignments.", "PREFIXED", "WRITE") in hub
    assert ("GROUP", "secure-hub", "LITERAL", "READ") in hub
    assert ("TOPIC", "secure.jobs", "LITERAL", "WRITE") not in hub
    assert ("TOPIC", "secure.deadletter", "LITERAL", "READ") in hub
    assert not any(n == "secure.deadletter" and op == "READ" for _, n, _, op in worker)
    # Runtimes: written by the hub's user alone (operators), never touched by a worker.
    writers = {
        role
        for role in ROLES
        for r in role_acls(role, TOPICS, ["east"])
        if r.name == "secure.runtimes" and r.operation == Operation.WRITE
    }
    assert writers == {"hub"}
    assert not any(n == "secure.runtimes" for _, n, _, _ in worker)
    # Nobody but the hub and a worker for its own topic may create anything.
    creators = {
        role
        for role in ROLES
        for rule in role_acls(role, TOPICS, ["east"])
        if rule.operation == Operation.CREATE
    }
    assert creators == {"hub", "worker"}
    every = [rule for role in ROLES for rule in role_acls(role, TOPICS, ["east"])]
    assert all(r.resource_type in (ResourceType.TOPIC, ResourceType.GROUP) for r in every)
    assert all(r.pattern == PatternType.LITERAL or r.name.endswith(".") for r in every)


# -- on a broker that enforces them -----------------------------------------------------------


@dataclass(frozen=True)
class SecuredKafka:
    broker: KafkaBroker
    passwords: dict[str, str]

    def settings(self, user: str) -> KafkaSettings:
        assert self.broker.sasl_bootstrap is not None
        return KafkaSettings(
            bootstrap=self.broker.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_username=user,
            sasl_password=self.passwords[user],
        )

    def config_file(self, user: str, directory: Path) -> Path:
        """A `--config` file for a process running as `user` (owner-readable only)."""
        path = directory / f"{user}.yaml"
        path.touch(mode=0o600)
        settings = self.settings(user)
        path.write_text(
            yaml.safe_dump(
                {
                    "bootstrap": settings.bootstrap,
                    "topic_prefix": TOPICS.prefix,
                    "security_protocol": settings.security_protocol,
                    "sasl_username": user,
                    "sasl_password": settings.sasl_password,
                    "heartbeat_interval": 0.5,
                }
            )
        )
        return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    if shutil.which("java") is None:
        pytest.skip("the ACL broker is the sandbox broker (Java 17+ on PATH)")
    users = (ADMIN, EARLIER_HUB, OTHER_WORKER, *USERS.values())
    passwords = {user: secrets.token_hex(12) for user in users}
    broker = start_kafka(
        tmp_path_factory.mktemp("kafka-acl"), scram_users=passwords, authorizer=True
    )
    try:
        kafka = SecuredKafka(broker, passwords)
        asyncio.run(create_acls(kafka.settings(ADMIN), trainhub_acls(TOPICS, USERS, [CLUSTER])))
        earlier = [
            (f"User:{EARLIER_HUB}", rule)
            for rule in role_acls("hub", TOPICS)
            if not (rule.name == TOPICS.dead_letters and rule.operation == Operation.READ)
        ]
        asyncio.run(create_acls(kafka.settings(ADMIN), earlier))
        other = [(f"User:{OTHER_WORKER}", rule) for rule in role_acls("worker", TOPICS, [OTHER])]
        asyncio.run(create_acls(kafka.settings(ADMIN), other))
        yield kafka
    finally:
        stop_kafka(broker)


@pytest.fixture
async def admin_bus(secured: SecuredKafka) -> AsyncIterator[KafkaBus]:
    bus = KafkaBus(secured.settings(ADMIN))
    await bus.start()
    yield bus
    await bus.close()


@pytest.mark.kafka
async def test_hub_worker_and_producer_as_their_own_users_run_a_job_to_succeeded(
    secured: SecuredKafka, admin_bus: KafkaBus, tmp_path: Path
) -> None:
    hub = Process(
        "hub", ["hub", "--config", str(secured.config_file(USERS["hub"], tmp_path))], tmp_path
    )
    processes = [hub]
    try:
        shared = {spec.name for spec in TOPICS.shared_specs()}
        # Under ACLs the hub creates the shared topics; the others only use them.
        assert await topics_exist(admin_bus, shared, 60), hub.log()[-3000:]
        worker_config = secured.config_file(USERS["worker"], tmp_path)
        worker = Process(
            "worker",
            ["worker", "--config", str(worker_config), "--cluster", CLUSTER, "--backend", "sim"],
            tmp_path,
        )
        processes.append(worker)
        job = tmp_path / "job.yaml"
        job.write_text(yaml.safe_dump(jax_job("secured", workers=2, duration="0.5s")))
        producer_config = str(secured.config_file(USERS["producer"], tmp_path))
        submit = await _trainhub("submit", str(job), "--watch", "--config", producer_config)
        logs = "\n".join(p.log()[-2000:] for p in processes)
        assert submit.returncode == 0, submit.stdout + submit.stderr + logs
        for phase in ("Queued", "Assigned", "Created", "Running", "Succeeded"):
            assert phase in submit.stdout
        shown = await _trainhub("status", "default/secured", "--config", producer_config)
        assert shown.returncode == 0 and "Succeeded" in shown.stdout, shown.stderr
        for process in processes:
            assert process.popen.poll() is None, process.log()[-3000:]
            assert "AuthorizationFailed" not in process.log(), process.log()[-3000:]
    finally:
        stop_all(processes)


@pytest.mark.kafka
async def test_each_user_is_refused_what_its_role_lacks_with_a_clear_error(
    secured: SecuredKafka, admin_bus: KafkaBus
) -> None:
    await admin_bus.create_topics(
        [*TOPICS.shared_specs(), TOPICS.assignment_spec(CLUSTER), TOPICS.assignment_spec("other")]
    )
    producer = KafkaBus(secured.settings(USERS["producer"]))
    worker = KafkaBus(secured.settings(USERS["worker"]))
    await producer.start()
    await worker.start()
    try:
        started = time.monotonic()
        with pytest.raises(KafkaAuthorizationError, match="User:trainhub-producer") as refused:
            await producer.publish(TOPICS.assignments(CLUSTER), b"{}")
        assert "secure.assignments.solo" in str(refused.value)
        # Refused at once, not after the retries a broker outage would get.
        assert time.monotonic() - started < 10
        # It may see the jobs topic (it writes there) but not read what others submitted.
        await _refused_reading(producer.subscribe([TOPICS.jobs], group=None), "trainhub-producer")
        await producer.publish(TOPICS.jobs, b"{}")  # what it may do still works

        with pytest.raises(KafkaAuthorizationError, match="User:trainhub-worker"):
            await worker.subscribe([TOPICS.assignments("other")], group=None).start()
        with pytest.raises(KafkaAuthorizationError, match="User:trainhub-worker"):
            await worker.publish(TOPICS.jobs, b"{}")
        # Its own cluster's assignments in its own group: allowed.
        mine = worker.subscribe([TOPICS.assignments(CLUSTER)], group=TOPICS.worker_group(CLUSTER))
        await mine.start()
        try:
            for _ in range(40):
                await mine.poll(timeout=0.25)
                if mine.assignment():
                    break
            assert mine.assignment() == {TopicPartition(TOPICS.assignments(CLUSTER), 0)}
        finally:
            await mine.stop()
        await _refused_reading(
            worker.subscribe([TOPICS.assignments(CLUSTER)], group=TOPICS.hub_group),
            "trainhub-worker",
        )
    finally:
        await producer.close()
        await worker.close()


async def _refused_reading(subscription: Subscription, user: str) -> None:
    await subscription.start()
    try:
        with pytest.raises(KafkaAuthorizationError, match=f"User:{user}"):
            for _ in range(20):
                await subscription.poll(timeout=0.5)
    finally:
        await subscription.stop()


@pytest.mark.kafka
async def test_a_hub_still_under_the_acls_of_before_the_dead_letter_read_warns_and_runs(
    secured: SecuredKafka, admin_bus: KafkaBus, caplog: pytest.LogCaptureFixture
) -> None:
    # Upgraded before its new READ on the dead-letter topic was granted: it says what to
    # grant, and places jobs as before (only replayed bad records are set aside again).
    await admin_bus.create_topics(TOPICS.shared_specs())
    await publish_heartbeat(admin_bus, TOPICS, cluster(CLUSTER, node("n1", cpu="8", memory="16Gi")))
    # Something to read there: describing the topic (which WRITE allows) shows it non-empty.
    await admin_bus.publish(TOPICS.dead_letters, b"set aside before", key=b"x")
    bus = KafkaBus(secured.settings(EARLIER_HUB))
    await bus.start()
    hub = Hub(bus, TOPICS, HubConfig(schedule_interval=0.1, source="trainhub/hub-earlier"))
    try:
        with caplog.at_level(logging.WARNING, logger="dispatcher.hub"):
            await asyncio.wait_for(hub.start(), timeout=60)
        assert f"grant the hub READ on {TOPICS.dead_letters}" in caplog.text
        uid = await submit_document(admin_bus, TOPICS, jax_job("earlier-acls", workers=1))
        await until(
            lambda: (r := hub.ledger.get(uid)) is not None and r.phase == JobPhase.ASSIGNED,
            timeout=30,
        )
    finally:
        await hub.stop()
        await bus.close()


@pytest.mark.kafka
async def test_anonymous_plaintext_clients_may_do_nothing(secured: SecuredKafka) -> None:
    anonymous = KafkaBus(KafkaSettings(bootstrap=secured.broker.bootstrap))
    with pytest.raises(KafkaAuthorizationError, match="User:ANONYMOUS"):
        await anonymous.start()


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


async def _trainhub(*args: str, timeout: float = 120) -> Finished:
    """A trainhub command as its own process, without blocking the event loop."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "trainhub",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    finally:
        if process.returncode is None:  # timed out: leave no orphan
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return Finished(process.returncode, stdout.decode(), stderr.decode())


@pytest.mark.kafka
async def test_a_workers_credentials_cannot_make_anyone_believe_anything_of_another_cluster(
    secured: SecuredKafka, admin_bus: KafkaBus
) -> None:
    """Issue 27 item 4: `worker-other` forges a Failed status of a job running on `solo` and
    a heartbeat named `solo`; neither the hub nor any reader believes either."""
    await admin_bus.create_topics(TOPICS.shared_specs())
    solo = KafkaBus(secured.settings(USERS["worker"]))
    other = KafkaBus(secured.settings(OTHER_WORKER))
    producer = KafkaBus(secured.settings(USERS["producer"]))
    hub_bus = KafkaBus(secured.settings(USERS["hub"]))
    for bus in (solo, other, producer, hub_bus):
        await bus.start()
    registry = CollectorRegistry()
    hub = Hub(hub_bus, TOPICS, HubConfig(schedule_interval=0.1), registry=registry)
    try:
        await hub.start()
        # The honest worker of solo reports on its own topic, which it creates.
        solo_snapshot = cluster(CLUSTER, node("n1", cpu="8", memory="16Gi"))
        await publish_heartbeat(solo, TOPICS, solo_snapshot)
        uid = await submit_document(producer, TOPICS, jax_job("honest", workers=1))
        await until(
            lambda: (r := hub.ledger.get(uid)) is not None and r.phase == JobPhase.ASSIGNED,
            timeout=30,
        )
        record = hub.ledger.get(uid)
        assert record is not None and record.cluster == CLUSTER
        running = JobStatusUpdate(
            uid=uid, phase=JobPhase.RUNNING, cluster=CLUSTER, attempt=record.attempt, sequence=1
        )
        await publish_report(
            solo, TOPICS, CLUSTER, uid, make_event(EventType.JOB_STATUS, "worker", uid, running)
        )
        await until(lambda: record.phase == JobPhase.RUNNING, timeout=30)

        # The other cluster's worker may not write the shared topics nor solo's reports.
        forged = JobStatusUpdate(
            uid=uid,
            phase=JobPhase.FAILED,
            cluster=CLUSTER,
            attempt=record.attempt,
            sequence=99,
            reason="Forged",
        )
        event = make_event(EventType.JOB_STATUS, f"trainhub/worker/{CLUSTER}", uid, forged)
        for topic in (TOPICS.status, TOPICS.clusters, TOPICS.reports(CLUSTER)):
            with pytest.raises(KafkaAuthorizationError, match=f"User:{OTHER_WORKER}"):
                await publish_event(other, topic, uid, event)
        # On its own reports topic: a status and a heartbeat that speak for solo, and a
        # status of solo's job in its own name.
        await publish_report(other, TOPICS, OTHER, uid, event)
        empty = cluster(CLUSTER, node("n1", cpu="1", memory="1Gi"), jobs=[])
        await publish_report(
            other,
            TOPICS,
            OTHER,
            CLUSTER,
            make_event(EventType.CLUSTER_HEARTBEAT, "worker", CLUSTER, empty),
        )
        mine = forged.model_copy(update={"cluster": OTHER})
        await publish_report(
            other, TOPICS, OTHER, uid, make_event(EventType.JOB_STATUS, "worker", uid, mine)
        )

        def forged_count() -> float:
            value = registry.get_sample_value("trainhub_forged_reports_total", {"cluster": OTHER})
            return value or 0.0

        # Found within seconds (a prefix subscription), and both forgeries set aside.
        await until(lambda: forged_count() == 2, timeout=30)
        dead = [
            r
            async for r in records_to_end(admin_bus, TOPICS.dead_letters)
            if r.key is not None and r.key.decode() in (uid, CLUSTER)
        ]
        reasons = [dead_letter_reason(r) or "" for r in dead]
        assert sum("forged report" in reason for reason in reasons) == 2, reasons
        await hub_bus.flush()
        assert record.phase == JobPhase.RUNNING and record.cluster == CLUSTER
        registered = hub.clusters.get(CLUSTER)
        assert registered is not None and registered.nodes[0].allocatable["cpu"] == 8

        # What readers (the producer's user) see is what the hub accepted, nothing else.
        latest = await latest_status(producer, TOPICS, {uid})
        assert latest is not None and latest[0].phase == JobPhase.RUNNING
        statuses = [
            e.data_as(JobStatusUpdate)
            async for e in events_to_end(producer, TOPICS.status, keys={uid})
            if e.type == EventType.JOB_STATUS
        ]
        assert not [u for u in statuses if u.reason == "Forged"], statuses
        assert [u.phase for u in statuses if u.cluster == CLUSTER][-1] == JobPhase.RUNNING
        seen = await read_clusters(producer, TOPICS)
        assert seen[CLUSTER].nodes[0].allocatable["cpu"] == 8
        assert OTHER not in seen  # it never sent a heartbeat of its own
    finally:
        await hub.stop()
        for bus in (solo, other, producer, hub_bus):
            await bus.close()
