"""The `Bus` on Apache Kafka (aiokafka): idempotent acks=all producer, manual commits."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    CommitFailedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    RequestTimedOutError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from bus.base import (
    Bus,
    BusError,
    Headers,
    Record,
    RecordMetadata,
    RevokeCallback,
    StartFrom,
    Subscription,
    TopicPartition,
    TopicSpec,
    UnknownTopicError,
)
from bus.kafka_settings import KafkaSettings

log = logging.getLogger(__name__)

_TRANSIENT = (KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError)
_AUTH = (AuthenticationFailedError, UnsupportedSaslMechanismError, SaslAuthenticationFailed)
_TOPIC_EXISTS = 36


def _retrying(settings: KafkaSettings) -> AsyncRetrying:
    return AsyncRetrying(
        retry=retry_if_exception_type(_TRANSIENT),
        wait=wait_exponential(multiplier=0.2, max=10),
        stop=stop_after_attempt(settings.connect_attempts),
        reraise=True,
    )


def _fatal(exc: BaseException, settings: KafkaSettings, action: str) -> BusError:
    if isinstance(exc, _AUTH):
        return BusError(
            f"Kafka at {settings.bootstrap} refused the credentials of "
            f"{settings.sasl_username!r} ({settings.sasl_mechanism}) while {action}: {exc}"
        )
    return BusError(f"Kafka at {settings.bootstrap} failed while {action}: {exc!r}")


class KafkaBus(Bus):
    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._producer: AIOKafkaProducer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._topics: set[str] = set()

    async def start(self) -> None:
        producer = AIOKafkaProducer(
            **self.settings.client_options(),
            enable_idempotence=True,
            acks="all",
            linger_ms=2,
        )
        admin = AIOKafkaAdminClient(**self.settings.client_options())
        try:
            await self._check_credentials()
            async for attempt in _retrying(self.settings):
                with attempt:
                    await producer.start()
            async for attempt in _retrying(self.settings):
                with attempt:
                    await admin.start()
        except KafkaError as exc:
            await producer.stop()
            await admin.close()
            raise _fatal(exc, self.settings, "connecting") from exc
        self._producer, self._admin = producer, admin
        log.info("connected to Kafka", extra={"topic": self.settings.bootstrap})

    async def _check_credentials(self) -> None:
        """aiokafka reports refused credentials as a connection failure and would be retried
        for a long while; one direct connection tells the two apart at once."""
        if not self.settings.security_protocol.startswith("SASL"):
            return
        options = self.settings.client_options()
        host, _, port = self.settings.bootstrap.split(",")[0].strip().rpartition(":")
        try:
            conn = await create_conn(
                host,
                int(port),
                client_id=options["client_id"],
                request_timeout_ms=options["request_timeout_ms"],
                ssl_context=options.get("ssl_context"),
                security_protocol=options["security_protocol"],
                sasl_mechanism=options["sasl_mechanism"],
                sasl_plain_username=options["sasl_plain_username"],
                sasl_plain_password=options["sasl_plain_password"],
            )
        except _AUTH:
            raise
        except (OSError, KafkaError):
            return  # not reachable yet: the retried start below deals with that
        conn.close()

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
        if self._admin is not None:
            await self._admin.close()
        self._producer = self._admin = None

    def _started_producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise BusError("KafkaBus is not started")
        return self._producer

    async def create_topics(self, specs: Sequence[TopicSpec]) -> None:
        if self._admin is None:
            raise BusError("KafkaBus is not started")
        missing = [s for s in specs if s.name not in self._topics]
        if not missing:
            return
        response = await self._admin.create_topics([_new_topic(s) for s in missing])
        for topic, code, *rest in response.topic_errors:
            if code not in (0, _TOPIC_EXISTS):
                detail = rest[0] if rest else ""
                raise BusError(f"cannot create topic {topic!r}: error {code} {detail}")
        self._topics.update(s.name for s in missing)

    async def _require_topic(self, topic: str) -> None:
        if topic in self._topics:
            return
        assert self._admin is not None
        self._topics.update(await self._admin.list_topics())
        if topic not in self._topics:
            raise UnknownTopicError(
                f"topic {topic!r} does not exist on {self.settings.bootstrap} "
                "(trainhub creates its topics at start; auto-creation is off)"
            )

    async def publish(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers = ()
    ) -> RecordMetadata:
        await self._require_topic(topic)
        producer = self._started_producer()
        try:
            async for attempt in _retrying(self.settings):
                with attempt:
                    meta = await producer.send_and_wait(
                        topic, value, key=key, headers=list(headers)
                    )
        except KafkaError as exc:
            raise _fatal(exc, self.settings, f"publishing to {topic}") from exc
        return RecordMetadata(meta.topic, meta.partition, meta.offset)

    async def send(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers = ()
    ) -> None:
        await self._require_topic(topic)
        # The producer retries delivery itself (idempotently); flush() surfaces failures.
        await self._started_producer().send(topic, value, key=key, headers=list(headers))

    async def flush(self) -> None:
        await self._started_producer().flush()

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        group: str | None,
        start_from: StartFrom = "earliest",
        on_revoke: RevokeCallback | None = None,
    ) -> KafkaSubscription:
        return KafkaSubscription(self, list(topics), group, start_from, on_revoke)


def _new_topic(spec: TopicSpec) -> NewTopic:
    config: dict[str, str] = dict(spec.extra_config)
    if spec.compacted:
        config["cleanup.policy"] = "compact"
    elif spec.retention_ms is not None:
        config["retention.ms"] = str(spec.retention_ms)
    return NewTopic(
        name=spec.name,
        num_partitions=spec.partitions,
        replication_factor=spec.replication,
        topic_configs=config,
    )


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, on_revoke: RevokeCallback | None) -> None:
        self._on_revoke = on_revoke

    async def on_partitions_revoked(self, revoked: set[KafkaTP]) -> None:
        if self._on_revoke is not None and revoked:
            await self._on_revoke({TopicPartition(tp.topic, tp.partition) for tp in revoked})

    async def on_partitions_assigned(self, assigned: set[KafkaTP]) -> None:
        log.debug("partitions assigned: %s", sorted(assigned))


class KafkaSubscription(Subscription):
    def __init__(
        self,
        bus: KafkaBus,
        topics: list[str],
        group: str | None,
        start_from: StartFrom,
        on_revoke: RevokeCallback | None,
    ) -> None:
        self._bus = bus
        self._topics = topics
        self._group = group
        self._start_from = start_from
        self._on_revoke = on_revoke
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        for topic in self._topics:
            await self._bus._require_topic(topic)
        options: dict[str, Any] = dict(self._bus.settings.client_options())
        consumer = AIOKafkaConsumer(
            **options,
            group_id=self._group,
            enable_auto_commit=False,
            auto_offset_reset=self._start_from,
            isolation_level="read_committed",
            max_poll_interval_ms=300_000,
            # A topic created moments ago may be missing from the first metadata; do not
            # wait the default five minutes for the next refresh.
            metadata_max_age_ms=5_000,
            # Followers of the status topic want answers in tenths of a second, not half one.
            fetch_max_wait_ms=100,
        )
        try:
            async for attempt in _retrying(self._bus.settings):
                with attempt:
                    await consumer.start()
        except KafkaError as exc:
            await consumer.stop()
            raise _fatal(exc, self._bus.settings, "starting a consumer") from exc
        await self._await_topics(consumer)
        listener = _Listener(self._on_revoke if self._group else None)
        consumer.subscribe(self._topics, listener=listener)
        if self._group is None:
            # Without a group, aiokafka assigns every partition itself once metadata arrives;
            # wait for that so seeks and lag work from the first call.
            await self._await_assignment(consumer)
        self._consumer = consumer

    async def _await_topics(self, consumer: AIOKafkaConsumer) -> None:
        """Subscribe only once the broker's metadata lists our topics (just-created topics
        take a moment), or the group's first assignment silently misses them."""
        for _ in range(100):
            if set(self._topics) <= set(await consumer.topics()):
                return
            await asyncio.sleep(0.1)
        await consumer.stop()
        raise UnknownTopicError(f"topics {self._topics} not visible after 10 s")

    async def _await_assignment(self, consumer: AIOKafkaConsumer) -> None:
        for _ in range(100):
            topics = {tp.topic for tp in consumer.assignment()}
            if topics >= set(self._topics):
                return
            await asyncio.sleep(0.1)
        await consumer.stop()
        raise UnknownTopicError(f"no partitions of {self._topics} visible after 10 s")

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise BusError("subscription is not started")
        return self._consumer

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        consumer = self._started()
        batches = await consumer.getmany(timeout_ms=int(timeout * 1000), max_records=max_records)
        records: list[Record] = []
        for tp, batch in batches.items():
            for msg in batch:
                records.append(
                    Record(
                        topic=tp.topic,
                        partition=tp.partition,
                        offset=msg.offset,
                        key=msg.key,
                        value=msg.value,
                        headers=tuple((k, v) for k, v in (msg.headers or ())),
                        timestamp_ms=msg.timestamp,
                    )
                )
        return records

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self._group is None or not offsets:
            return
        consumer = self._started()
        mine = {tp for tp in consumer.assignment()}
        owned = {
            KafkaTP(tp.topic, tp.partition): o
            for tp, o in offsets.items()
            if KafkaTP(tp.topic, tp.partition) in mine
        }
        if not owned:
            return
        try:
            await consumer.commit(owned)
        except (CommitFailedError, IllegalStateError) as exc:
            # A rebalance took the partitions away: their new owner re-reads from the
            # last commit, which is at-least-once, not loss.
            log.warning("commit skipped after a rebalance: %s", exc)

    def assignment(self) -> set[TopicPartition]:
        consumer = self._started()
        return {TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment()}

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        consumer = self._started()
        target = KafkaTP(tp.topic, tp.partition)
        if target not in consumer.assignment():
            raise BusError(f"cannot seek {tp.topic}[{tp.partition}]: not assigned")
        end = (await consumer.end_offsets([target]))[target]
        # Clamped to the end as the memory bus does; an offset before the log start (removed
        # by retention) resets by `start_from` on the next fetch.
        consumer.seek(target, max(0, min(offset, end)))

    async def seek_to_time(self, timestamp_ms: int) -> None:
        consumer = self._started()
        partitions = list(consumer.assignment())
        found = await consumer.offsets_for_times({tp: timestamp_ms for tp in partitions})
        ends = await consumer.end_offsets(partitions)
        for tp in partitions:
            hit = found.get(tp)
            consumer.seek(tp, hit.offset if hit is not None else ends[tp])

    async def lag(self) -> int:
        consumer = self._started()
        partitions = list(consumer.assignment())
        if not partitions:
            return 0
        ends = await consumer.end_offsets(partitions)
        total = 0
        for tp in partitions:
            total += max(0, ends[tp] - await consumer.position(tp))
        return total
