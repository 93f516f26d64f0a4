"""The Kafka bus against a real broker: round trips, groups, dead letters, SCRAM."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from bus.base import BusError, Record, TopicPartition, TopicSpec, UnknownTopicError
from bus.dead_letters import dead_letter_reason
from bus.events import EventConsumer, publish_event
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.reading import records_to_end
from bus.topics import Topics
from schemas.codec import decode_event
from schemas.events import CloudEvent, EventType, JobRef, make_event
from tests.kafka_target import KafkaTarget

pytestmark = pytest.mark.kafka


async def _drain(
    bus: KafkaBus, topic: str, expected: int, group: str | None = None
) -> list[Record]:
    subscription = bus.subscribe([topic], group=group, start_from="earliest")
    await subscription.start()
    records: list[Record] = []
    deadline = time.monotonic() + 30
    while len(records) < expected and time.monotonic() < deadline:
        records.extend(await subscription.poll(timeout=0.5))
    await subscription.stop()
    return records


async def test_round_trip_keeps_keys_order_per_key_and_cloudevents_headers(
    bus: KafkaBus, topics: Topics
) -> None:
    topic = topics.jobs
    await bus.create_topics([TopicSpec(topic, partitions=3)])
    sent: dict[str, list[str]] = {}
    for _ in range(30):
        for uid in ("job-a", "job-b", "job-c"):
            event = make_event(EventType.JOB_DELETED, "test", uid, JobRef(uid=uid))
            sent.setdefault(uid, []).append(event.id)
            await publish_event(bus, topic, uid, event, wait=False)
    await bus.flush()
    records = await _drain(bus, topic, 90)
    assert len(records) == 90
    for uid, ids in sent.items():
        mine = sorted((r for r in records if r.key == uid.encode()), key=lambda r: r.offset)
        assert len({r.partition for r in mine}) == 1
        events = [decode_event(r.headers, r.value) for r in mine]
        assert [e.id for e in events] == ids
        assert all(e.type == EventType.JOB_DELETED and e.subject == uid for e in events)
        header_names = {k for k, _ in mine[0].headers}
        assert {"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time"} <= header_names


async def test_redelivery_after_crash_before_commit_with_idempotent_effect(
    bus: KafkaBus, topics: Topics
) -> None:
    topic = topics.jobs
    await bus.create_topics([TopicSpec(topic, partitions=1)])
    for i in range(5):
        uid = f"job-{i}"
        await publish_event(
            bus, topic, uid, make_event(EventType.JOB_DELETED, "t", uid, JobRef(uid=uid))
        )
    effects: dict[str, int] = {}  # event id -> times applied (the "durable" effect store)
    deliveries: list[str] = []

    class Crash(Exception):
        pass

    async def handler(event: CloudEvent, record: Record) -> None:
        deliveries.append(event.id)
        if event.id not in effects:  # idempotent by event id
            effects[event.id] = 1
        if len(deliveries) == 3:
            raise Crash("killed after the effect, before the commit")

    group = f"{topics.prefix}-g"
    first = EventConsumer(
        bus, [topic], handler, group=group, dead_letter_topic=topic, component="t"
    )
    await first.subscription.start()
    with pytest.raises(Crash):
        while True:
            await first.poll_once(timeout=1)
    await first.subscription.stop()
    second = EventConsumer(
        bus, [topic], handler, group=group, dead_letter_topic=topic, component="t"
    )
    await second.subscription.start()
    while len(effects) < 5 or await second.subscription.lag() > 0:
        await second.poll_once(timeout=1)
    await second.subscription.stop()
    assert len(effects) == 5 and set(effects.values()) == {1}
    assert len(deliveries) > 5, "the uncommitted events must have been delivered again"


async def test_garbage_and_invalid_events_are_dead_lettered_and_consumer_continues(
    bus: KafkaBus, topics: Topics
) -> None:
    await bus.create_topics(topics.shared_specs())
    await bus.publish(topics.jobs, b"\xff\xfe not json", key=b"k1")
    await bus.publish(topics.jobs, b"{}", key=b"k2", headers=(("ce_specversion", b"1.0"),))
    good = make_event(EventType.JOB_DELETED, "t", "ok", JobRef(uid="ok"))
    await publish_event(bus, topics.jobs, "ok", good)
    seen: list[str] = []

    async def handler(event: CloudEvent, record: Record) -> None:
        if event.subject != "ok":
            raise ValueError("not for us")
        seen.append(event.id)

    consumer = EventConsumer(
        bus,
        [topics.jobs],
        handler,
        group=f"{topics.prefix}-dl",
        dead_letter_topic=topics.dead_letters,
        component="test",
    )
    await consumer.subscription.start()
    deadline = time.monotonic() + 30
    while not seen and time.monotonic() < deadline:
        await consumer.poll_once(timeout=0.5)
    await consumer.subscription.stop()
    assert seen == [good.id]
    dead = await _drain(bus, topics.dead_letters, 2)
    reasons = sorted(dead_letter_reason(r) or "" for r in dead)
    assert len(reasons) == 2
    assert all(r.startswith("undecodable") for r in reasons)
    assert any("missing CloudEvents headers" in r for r in reasons)


async def test_a_reader_without_group_is_not_caught_up_while_between_assignments(
    bus: KafkaBus, topics: Topics
) -> None:
    """aiokafka empties a group-less consumer's assignment when a metadata answer lacks the
    topic, and assigns it again with the next: the lag in between is the topic's, not 0."""
    topic = topics.status
    await bus.create_topics([TopicSpec(topic, partitions=2)])
    for index in range(4):
        await bus.publish(topic, f"r{index}".encode(), key=f"k{index}".encode())
    subscription = bus.subscribe([topic], group=None, start_from="earliest")
    await subscription.start()
    try:
        consumer = subscription._started()
        tps = set(consumer.assignment())
        assert len(tps) == 2 and await subscription.lag() == 4
        consumer._subscription.assign_from_subscribed(set())  # what the bare answer does
        assert consumer.assignment() == set()

        async def next_metadata_answer() -> None:
            await asyncio.sleep(0.3)
            consumer._subscription.assign_from_subscribed(tps)

        again = asyncio.create_task(next_metadata_answer())
        try:
            lag = await subscription.lag()
        finally:
            await again  # assigned again whatever lag() did, so that stop() can finish
        assert lag == 4
    finally:
        await subscription.stop()


async def test_a_reader_with_positions_reads_on_from_where_it_stopped(
    bus: KafkaBus, topics: Topics
) -> None:
    """`records_to_end(positions=...)`: a second read gets only what came after the first."""
    topic = topics.status
    await bus.create_topics([TopicSpec(topic, partitions=2)])
    for index in range(4):
        await bus.publish(topic, f"a{index}".encode(), key=f"k{index}".encode())
    positions: dict[TopicPartition, int] = {}
    first = [r.value or b"" async for r in records_to_end(bus, topic, positions=positions)]
    assert sorted(first) == [b"a0", b"a1", b"a2", b"a3"]
    assert sum(positions.values()) == 4
    for index in range(3):
        await bus.publish(topic, f"b{index}".encode(), key=f"k{index}".encode())
    second = [r.value or b"" async for r in records_to_end(bus, topic, positions=positions)]
    assert sorted(second) == [b"b0", b"b1", b"b2"]
    assert [r async for r in records_to_end(bus, topic, positions=positions)] == []


async def test_unknown_topic_is_a_clear_fatal_error(bus: KafkaBus, topics: Topics) -> None:
    with pytest.raises(UnknownTopicError, match="does not exist"):
        await bus.publish(f"{topics.prefix}.nowhere", b"x")


async def test_topics_are_created_with_their_settings(bus: KafkaBus, topics: Topics) -> None:
    await bus.create_topics(topics.shared_specs())
    await bus.create_topics(topics.shared_specs())  # idempotent
    by_topic = await _topic_configs(bus, [topics.clusters, topics.jobs])
    configs = by_topic[topics.clusters]
    assert by_topic[topics.jobs]["retention.ms"] == str(topics.retention_ms)
    assert by_topic[topics.jobs]["cleanup.policy"] == "delete"
    assert configs["cleanup.policy"] == "compact"


async def _topic_configs(bus: KafkaBus, names: list[str]) -> dict[str, dict[str, str]]:
    """Each topic's configuration as the broker describes it. A topic created a moment ago
    may not be in the answering broker's metadata yet (KRaft propagates it asynchronously):
    such a resource comes back with an error code and no entries, so ask again."""
    assert bus._admin is not None
    resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
    found: dict[str, dict[str, str]] = {}
    errors: list[tuple[int, str]] = []
    for _ in range(50):
        described = await bus._admin.describe_configs(resources)
        answers = [r for response in described for r in response.resources]
        errors = [(r[0], r[1]) for r in answers if r[0] != 0]
        found = {r[3]: {entry[0]: entry[1] for entry in r[4]} for r in answers if r[0] == 0}
        if not errors and set(found) == set(names):
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"topic configs of {names} not described after 10 s: {errors}")


async def test_scram_right_credentials_work_and_wrong_password_fails_fast(
    kafka: KafkaTarget, topics: Topics
) -> None:
    if kafka.sasl_bootstrap is None:
        pytest.skip(f"the {kafka.origin} broker has no SCRAM listener configured")
    good = KafkaBus(
        KafkaSettings(
            bootstrap=kafka.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_username=kafka.sasl_username,
            sasl_password=kafka.sasl_password,
        )
    )
    await good.start()
    await good.create_topics([TopicSpec(topics.jobs, partitions=1)])
    await good.publish(topics.jobs, b"hello", key=b"k")
    assert [r.value for r in await _drain(good, topics.jobs, 1)] == [b"hello"]
    await good.close()
    bad = KafkaBus(
        KafkaSettings(
            bootstrap=kafka.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_username=kafka.sasl_username,
            sasl_password="wrong-password",
        )
    )
    started = time.monotonic()
    with pytest.raises(BusError, match="refused the credentials"):
        await asyncio.wait_for(bad.start(), 30)
    assert time.monotonic() - started < 10


async def test_a_subscription_cancelled_while_starting_leaves_no_consumer_open(
    bus: KafkaBus, topics: Topics
) -> None:
    # A process stopped while a consumer is still connecting (the broker slow or gone) must
    # close that consumer: nothing else holds it yet.
    await bus.create_topics([TopicSpec(topics.status, partitions=1, replication=1)])
    unclosed: list[str] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unclosed.append(context["message"]))
    try:
        for delay in (0.0, 0.02, 0.05, 0.1, 0.2, 0.4):
            subscription = bus.subscribe([topics.status], group=None, start_from="earliest")
            starting = asyncio.create_task(subscription.start())
            await asyncio.sleep(delay)
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            await subscription.stop()
            del subscription, starting
            gc.collect()
            await asyncio.sleep(0)
        assert not [m for m in unclosed if "Unclosed AIOKafkaConsumer" in m], unclosed
    finally:
        loop.set_exception_handler(None)
