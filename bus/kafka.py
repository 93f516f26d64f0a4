"""The `Bus` on Apache Kafka (aiokafka): idempotent acks=all producer, manual commits.

A broker that goes away (restart, network cut) is waited for: every call retries retriable
errors with bounded exponential backoff, and the producer keeps undelivered records for
`KafkaSettings.delivery_timeout_ms`, so hub, workers and producers carry on once it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    CommitFailedError,
    GroupAuthorizationFailedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    RequestTimedOutError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    UnsupportedSaslMechanismError,
)
from aiokafka.partitioner import DefaultPartitioner, murmur2

from bus.base import (
    Bus,
    BusError,
    BusPermissionError,
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
from bus.kafka_settings import KafkaSettings, connect_first_broker
from bus.retry import RetryPolicy, retry_transient

log = logging.getLogger(__name__)

_TRANSIENT = (KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError)
_AUTH = (AuthenticationFailedError, UnsupportedSaslMechanismError, SaslAuthenticationFailed)
_DENIED = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
)
_NO_METADATA = "Unable to get cluster metadata"
"""How aiokafka words a plain KafkaError (not marked retriable) for metadata no known broker
answered: the broker is away, as with a connection error (a hub starting its consumers when
it went crashed on this instead of waiting for it)."""
_TOPIC_EXISTS = 36
_TOPIC_AUTHORIZATION_FAILED = 29
_MAX_BATCH_BYTES = 512 * 1024
"""Below the broker's default message.max.bytes (1 MiB), which a batch must fit."""
_T = TypeVar("_T")

CLOSE_GRACE_S = 5.0
"""How long closing waits for queued records. aiokafka's own stop waits up to the delivery
timeout (minutes) when no broker answers, which would hold a SIGTERMed process that long."""


def _transient(exc: BaseException) -> bool:
    """Errors a broker restart or a leader move causes, which go away by themselves:
    connection failures, timeouts and every error Kafka marks retriable (no leader yet,
    coordinator loading, not the coordinator...)."""
    if isinstance(exc, (*_AUTH, *_DENIED)):
        return False
    if type(exc) is KafkaError and _NO_METADATA in str(exc):
        return True
    return isinstance(exc, _TRANSIENT) or (isinstance(exc, KafkaError) and exc.retriable)


def _log_retry(error: BaseException, failures: int, wait: float) -> None:
    log.warning("Kafka unavailable (%r); retry %d in %.1fs", error, failures, wait)


async def _connecting(settings: KafkaSettings, call: Callable[[], Awaitable[_T]]) -> _T:
    """`call()` of a client that connects: a broker that never answers fails the start once
    `settings.connect_retry` runs out."""
    return await retry_transient(
        call, settings.connect_retry, transient=_transient, on_retry=_log_retry
    )


async def _until_back(settings: KafkaSettings, call: Callable[[], Awaitable[_T]]) -> _T:
    """`call()`, retried through a broker outage of up to `settings.outage_timeout_s`."""
    return await retry_transient(
        call, settings.outage_retry, transient=_transient, on_retry=_log_retry
    )


class _TopicsMissing(Exception):
    """Topics another principal creates are not there yet: looked for again with backoff."""


class _KeyHashCache:
    """Kafka's default partitioning (murmur2 of the key, as the Java clients do, so every
    producer puts a key on the same partition), with the hash kept per key: aiokafka's
    murmur2 is pure Python, and a job's statuses and assignment all carry its uid.

    `keys`: the keys kept (about 160 B each), enough for a burst of jobs in flight; not every
    job the process ever sent (65,536 grew a hub by 1.5 MB per 10,000 jobs, #27)."""

    def __init__(self, keys: int = 16_384) -> None:
        self._hash = functools.lru_cache(maxsize=keys)(murmur2)

    def __call__(self, key: bytes | None, partitions: list[int], available: list[int]) -> int:
        if key is None:
            return int(DefaultPartitioner()(key, partitions, available))
        hashed: int = self._hash(key)
        return partitions[(hashed & 0x7FFFFFFF) % len(partitions)]


class KafkaAuthorizationError(BusPermissionError):
    """The broker's ACLs do not allow this principal what it tried; retrying will not help."""


def _principal(settings: KafkaSettings) -> str:
    if settings.security_protocol.startswith("SASL") and settings.sasl_username:
        return f"User:{settings.sasl_username}"
    return "User:ANONYMOUS" if settings.security_protocol == "PLAINTEXT" else "this client"


def _fatal(exc: BaseException, settings: KafkaSettings, action: str) -> BusError:
    if isinstance(exc, _AUTH):
        return BusError(
            f"Kafka at {settings.bootstrap} refused the credentials of "
            f"{settings.sasl_username!r} ({settings.sasl_mechanism}) while {action}: {exc}"
        )
    if isinstance(exc, _DENIED):
        return KafkaAuthorizationError(
            f"Kafka at {settings.bootstrap} refused {_principal(settings)} {action}: "
            f"{type(exc).__name__} (the ACLs each role needs: bus/kafka_acls.py, README)"
        )
    return BusError(f"Kafka at {settings.bootstrap} failed while {action}: {exc!r}")


class KafkaBus(Bus):
    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._producer: AIOKafkaProducer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._topics: set[str] = set()
        self._undelivered: list[tuple[str, BaseException]] = []
        """Records queued with `send` that the producer gave up on; `flush` raises them."""

    async def start(self) -> None:
        producer = AIOKafkaProducer(
            **{
                **self.settings.client_options(),
                # aiokafka fails a queued batch whose partition has no known leader once it is
                # older than the request timeout; a broker restart is longer than 15 s.
                "request_timeout_ms": self.settings.delivery_timeout_ms,
            },
            enable_idempotence=True,
            acks="all",
            linger_ms=2,
            # A job's document makes records of a few KiB: the default 16 KiB batch sent a
            # request per handful of them, and requests, not bytes, were the cost.
            max_batch_size=_MAX_BATCH_BYTES,
            partitioner=_KeyHashCache(),
        )
        admin = AIOKafkaAdminClient(**self.settings.client_options())
        try:
            await self._check_credentials()
            await _connecting(self.settings, producer.start)
            await _connecting(self.settings, admin.start)
        except KafkaError as exc:
            await producer.stop()
            await admin.close()
            raise _fatal(exc, self.settings, "connecting") from exc
        except asyncio.CancelledError:  # stopped while connecting (SIGTERM): leave no client
            await producer.stop()
            await admin.close()
            raise
        self._producer, self._admin = producer, admin
        log.info("connected to Kafka", extra={"bootstrap": self.settings.bootstrap})

    async def _check_credentials(self) -> None:
        """aiokafka reports refused credentials as a connection failure and would be retried
        for a long while; one direct connection tells the two apart at once."""
        if not self.settings.security_protocol.startswith("SASL"):
            return
        try:
            conn = await connect_first_broker(self.settings)
        except _AUTH:
            raise
        except (OSError, KafkaError):
            return  # not reachable yet: the retried start below deals with that
        conn.close()

    async def close(self) -> None:
        producer, admin = self._producer, self._admin
        self._producer = self._admin = None
        if producer is not None:
            await _stop_producer(producer, CLOSE_GRACE_S)
        if admin is not None:
            await admin.close()

    def _started_producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise BusError("KafkaBus is not started")
        return self._producer

    async def create_topics(self, specs: Sequence[TopicSpec], *, wait: float = 0.0) -> None:
        admin = self._admin
        if admin is None:
            raise BusError("KafkaBus is not started")
        missing = [s for s in specs if s.name not in self._topics]
        if not missing:
            return
        new_topics = [_new_topic(s) for s in missing]
        response = await _until_back(self.settings, lambda: admin.create_topics(new_topics))
        denied: set[str] = set()
        for topic, code, *rest in response.topic_errors:
            if code == _TOPIC_AUTHORIZATION_FAILED:
                # Under ACLs only the hub (and a worker, for its own assignments topic) may
                # create topics; the others use them once they exist (see bus/kafka_acls.py).
                denied.add(topic)
            elif code not in (0, _TOPIC_EXISTS):
                detail = rest[0] if rest else ""
                raise BusError(f"cannot create topic {topic!r}: error {code} {detail}")
        if denied:
            log.info(
                "not allowed to create %s; using them once they exist", ", ".join(sorted(denied))
            )
        self._topics.update(s.name for s in missing if s.name not in denied)
        if denied and wait > 0:
            await self._await_created(denied, wait)

    async def _await_created(self, names: set[str], wait: float) -> None:
        """Until `names` exist (created by another principal), for at most `wait` seconds."""
        admin = self._admin
        assert admin is not None
        wanted = set(names)

        async def created() -> None:
            nonlocal wanted
            missing = wanted - set(await _until_back(self.settings, admin.list_topics))
            if missing:
                # A topic this principal may not even describe is not one it uses (a worker
                # never touches the jobs topic): waiting for it would never end.
                asked = sorted(missing)
                described = await _until_back(
                    self.settings, functools.partial(admin.describe_topics, asked)
                )
                hidden = {
                    t.get("topic") or t.get("name")
                    for t in described
                    if t["error_code"] == _TOPIC_AUTHORIZATION_FAILED
                }
                wanted, missing = wanted - hidden, missing - hidden
            if missing:
                raise _TopicsMissing(", ".join(sorted(missing)))
            self._topics.update(wanted)

        def waiting(error: BaseException, failures: int, pause: float) -> None:
            if failures == 1:
                log.warning(
                    "waiting for %s to be created by the hub (%s may not create them)",
                    error,
                    _principal(self.settings),
                )

        try:
            await retry_transient(
                created,
                RetryPolicy(deadline=wait),
                transient=lambda error: isinstance(error, _TopicsMissing),
                on_retry=waiting,
            )
        except _TopicsMissing as still:
            raise UnknownTopicError(
                f"topics {still} were not created within {wait:.0f} s; "
                f"{_principal(self.settings)} may not create them: start the hub, which "
                "creates the shared topics, or grant CREATE"
            ) from None

    async def _require_topic(self, topic: str) -> None:
        if topic in self._topics:
            return
        admin = self._admin
        assert admin is not None
        self._topics.update(await _until_back(self.settings, admin.list_topics))
        if topic in self._topics:
            return
        # Listing shows only the topics this principal may describe: ask for this one by
        # name to tell "not there" from "not yours".
        described = await _until_back(self.settings, lambda: admin.describe_topics([topic]))
        if any(t["error_code"] == _TOPIC_AUTHORIZATION_FAILED for t in described):
            raise _fatal(TopicAuthorizationFailedError(), self.settings, f"using topic {topic}")
        raise UnknownTopicError(
            f"topic {topic!r} does not exist on {self.settings.bootstrap} "
            "(trainhub creates its topics at start, the hub first of all; auto-creation is off)"
        )

    async def publish(
        self, topic: str, value: bytes | None, *, key: bytes | None = None, headers: Headers = ()
    ) -> RecordMetadata:
        await self._require_topic(topic)
        producer = self._started_producer()
        try:
            meta = await _until_back(
                self.settings,
                lambda: producer.send_and_wait(topic, value, key=key, headers=list(headers)),
            )
        except KafkaError as exc:
            raise _fatal(exc, self.settings, f"publishing to {topic}") from exc
        return RecordMetadata(meta.topic, meta.partition, meta.offset)

    async def send(
        self, topic: str, value: bytes | None, *, key: bytes | None = None, headers: Headers = ()
    ) -> None:
        await self._require_topic(topic)
        producer = self._started_producer()
        # The producer retries delivery itself (idempotently, in order); a record it gives up
        # on is remembered here and raised by flush(), so no offset is committed past it.
        try:
            delivery = await _until_back(
                self.settings,
                lambda: producer.send(topic, value, key=key, headers=list(headers)),
            )
        except KafkaError as exc:
            raise _fatal(exc, self.settings, f"publishing to {topic}") from exc
        delivery.add_done_callback(lambda done: self._note_delivery(topic, done))

    async def publish_to_every_partition(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers = ()
    ) -> None:
        await self._require_topic(topic)
        producer = self._started_producer()
        await self.flush()  # after what is queued, in every partition
        partitions = await _until_back(self.settings, lambda: producer.partitions_for(topic))
        for partition in sorted(partitions):
            try:
                await _until_back(
                    self.settings,
                    lambda p=partition: producer.send_and_wait(  # type: ignore[misc]
                        topic, value, key=key, headers=list(headers), partition=p
                    ),
                )
            except KafkaError as exc:
                raise _fatal(exc, self.settings, f"publishing to {topic}") from exc

    def _note_delivery(self, topic: str, delivery: asyncio.Future[Any]) -> None:
        if delivery.cancelled():
            self._undelivered.append((topic, asyncio.CancelledError()))
            return
        error = delivery.exception()
        if error is not None:
            self._undelivered.append((topic, error))

    async def flush(self) -> None:
        await self._started_producer().flush()
        if self._undelivered:
            failed, self._undelivered = self._undelivered, []
            topic, first = failed[0]
            raise _fatal(
                first, self.settings, f"delivering {len(failed)} queued record(s) to {topic}"
            )

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        group: str | None,
        start_from: StartFrom = "earliest",
        on_revoke: RevokeCallback | None = None,
        session_timeout: float | None = None,
        sticky: bool = False,
        prefix: str | None = None,
    ) -> KafkaSubscription:
        return KafkaSubscription(
            self, list(topics), group, start_from, on_revoke, session_timeout, sticky, prefix
        )


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


async def _stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """`consumer.stop()`. aiokafka 0.14's fetcher awaits the fetch tasks it has just cancelled
    without catching their CancelledError, and has such tasks while the broker is unreachable:
    that error is not ours (unless we are being cancelled), so the stop is finished here
    instead of failing the shutdown with a traceback and an unclosed client."""
    try:
        await consumer.stop()
        return
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
    for pending in list(getattr(consumer._fetcher, "_pending_tasks", ())):
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pending
    await consumer._client.close()


async def _abandon_consumer(consumer: AIOKafkaConsumer) -> None:
    """Close a consumer whose start failed or was cancelled, whatever its stop raises (the
    caller re-raises its own error; a cancellation is already on its way)."""
    try:
        await _stop_consumer(consumer)
    except BaseException:  # the caller's error is the one to report
        with contextlib.suppress(BaseException):
            await consumer._client.close()


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
        session_timeout: float | None = None,
        sticky: bool = False,
        prefix: str | None = None,
    ) -> None:
        if prefix is not None and topics:
            raise ValueError("a Kafka consumer follows either named topics or a prefix")
        self._prefix = prefix
        self._bus = bus
        self._session_timeout = session_timeout
        self._sticky = sticky
        self._topics = topics
        self._group = group
        self._start_from = start_from
        self._on_revoke = on_revoke
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        for topic in self._topics:
            await self._bus._require_topic(topic)
        options: dict[str, Any] = dict(self._bus.settings.client_options())
        if self._session_timeout is not None:
            options["session_timeout_ms"] = int(self._session_timeout * 1000)
            options["heartbeat_interval_ms"] = max(100, int(self._session_timeout * 1000 / 4))
        if self._sticky:
            # aiokafka's sticky assignor keeps its state on the class: one of its own.
            assignor = type(
                "TrainhubStickyAssignor",
                (StickyPartitionAssignor,),
                {"member_assignment": None, "generation": -1},
            )
            options["partition_assignment_strategy"] = (assignor,)
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
            try:
                await _connecting(self._bus.settings, consumer.start)
            except KafkaError as exc:
                raise _fatal(exc, self._bus.settings, "starting a consumer") from exc
            await self._await_topics(consumer)
            listener = _Listener(self._on_revoke if self._group else None)
            if self._prefix is not None:
                # Matched against the metadata, refreshed every `metadata_max_age_ms`: a
                # topic created later joins the subscription within seconds.
                pattern = f"^{re.escape(self._prefix)}.*"
                consumer.subscribe(pattern=pattern, listener=listener)
            else:
                consumer.subscribe(self._topics, listener=listener)
            if self._group is None:
                # Without a group, aiokafka assigns every partition itself once metadata
                # arrives; wait for that so seeks and lag work from the first call.
                await self._await_assignment(consumer)
        except BaseException:
            # Failed, or cancelled (a process stopped while the broker is away): the consumer
            # is not ours yet, so nothing else would ever close it.
            await _abandon_consumer(consumer)
            raise
        self._consumer = consumer

    async def _await_topics(self, consumer: AIOKafkaConsumer) -> None:
        """Subscribe only once the broker's metadata lists our topics (just-created topics
        take a moment), or the group's first assignment silently misses them."""
        for _ in range(100):
            if set(self._topics) <= set(await _until_back(self._bus.settings, consumer.topics)):
                return
            await asyncio.sleep(0.1)
        raise UnknownTopicError(f"topics {self._topics} not visible after 10 s")

    async def _await_assignment(self, consumer: AIOKafkaConsumer) -> None:
        # Checked every 10 ms: the assignment follows the next metadata answer, a few ms
        # away, and each hub start waits on it for the status, heartbeat and dead-letter
        # readers (a 0.1 s step made that 0.3 s of every start and failover).
        for _ in range(1000):
            topics = {tp.topic for tp in consumer.assignment()}
            if topics >= set(self._topics):
                return
            await asyncio.sleep(0.01)
        raise UnknownTopicError(f"no partitions of {self._topics} visible after 10 s")

    async def stop(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await _stop_consumer(consumer)

    def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise BusError("subscription is not started")
        return self._consumer

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        consumer = self._started()
        try:
            batches = await consumer.getmany(
                timeout_ms=int(timeout * 1000), max_records=max_records
            )
        except _DENIED as exc:
            reading = ", ".join(self._topics) or f"{self._prefix}*"
            raise _fatal(exc, self._bus.settings, f"reading {reading}") from exc
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
            await _until_back(self._bus.settings, lambda: consumer.commit(owned))
        except (CommitFailedError, IllegalStateError) as exc:
            # A rebalance took the partitions away: their new owner re-reads from the
            # last commit, which is at-least-once, not loss.
            log.warning("commit skipped after a rebalance: %s", exc)

    async def ends(self) -> dict[TopicPartition, int]:
        consumer = self._started()
        partitions = list(consumer.assignment())
        found = await self._end_offsets(consumer, partitions) if partitions else {}
        return {TopicPartition(tp.topic, tp.partition): end for tp, end in found.items()}

    async def positions(self) -> dict[TopicPartition, int]:
        consumer = self._started()
        held: dict[TopicPartition, int] = {}
        for tp in list(consumer.assignment()):
            try:
                held[TopicPartition(tp.topic, tp.partition)] = await consumer.position(tp)
            except IllegalStateError:
                continue  # revoked meanwhile: not ours to wait for
        return held

    async def unassigned(self) -> int:
        consumer = self._started()
        names = set(self._topics)
        if self._prefix is not None:
            prefix = self._prefix
            listed = await _until_back(self._bus.settings, consumer.topics)
            names |= {t for t in listed if t.startswith(prefix)}
        wanted = {
            KafkaTP(topic, partition)
            for topic in names
            for partition in consumer.partitions_for_topic(topic) or ()
        }
        return len(wanted - consumer.assignment())

    def assignment(self) -> set[TopicPartition]:
        consumer = self._started()
        return {TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment()}

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        consumer = self._started()
        target = KafkaTP(tp.topic, tp.partition)
        if target not in consumer.assignment():
            raise BusError(f"cannot seek {tp.topic}[{tp.partition}]: not assigned")
        end = (await self._end_offsets(consumer, [target]))[target]
        # Clamped to the end as the memory bus does; an offset before the log start (removed
        # by retention) resets by `start_from` on the next fetch.
        consumer.seek(target, max(0, min(offset, end)))

    async def seek_to_time(self, timestamp_ms: int) -> None:
        consumer = self._started()
        partitions = list(consumer.assignment())
        # Ends first: a partition with no record at or after the time yet may get one between
        # the two look-ups, and an end read afterwards would skip it.
        ends = await self._end_offsets(consumer, partitions)
        found = await _until_back(
            self._bus.settings,
            lambda: consumer.offsets_for_times({tp: timestamp_ms for tp in partitions}),
        )
        for tp in partitions:
            hit = found.get(tp)
            consumer.seek(tp, hit.offset if hit is not None else ends[tp])

    async def lag(self) -> int:
        consumer = self._started()
        partitions = list(consumer.assignment())
        if not partitions:
            if self._group is not None:
                return 0  # a group member may hold no partition: nothing is its to read
            # Without a group every partition is ours, so none means aiokafka is between two
            # assignments (a metadata answer that lacked the topic empties it until the next
            # one). Reporting 0 then ended reads "to the end" before they began.
            await self._await_assignment(consumer)
            partitions = list(consumer.assignment())
        ends = await self._end_offsets(consumer, partitions)
        total = 0
        for tp in partitions:
            total += max(0, ends[tp] - await consumer.position(tp))
        return total

    async def _end_offsets(
        self, consumer: AIOKafkaConsumer, partitions: list[KafkaTP]
    ) -> dict[KafkaTP, int]:
        ends: dict[KafkaTP, int] = await _until_back(
            self._bus.settings, lambda: consumer.end_offsets(partitions)
        )
        return ends


async def _stop_producer(producer: AIOKafkaProducer, grace: float) -> None:
    """Deliver what is queued if a broker takes it within `grace`; otherwise fail those
    records (their senders see the error; nothing was acknowledged for them) and stop."""
    try:
        await asyncio.wait_for(producer.flush(), grace)
    except TimeoutError:
        log.warning(
            "closing with records the broker has not taken after %.0f s; they fail undelivered",
            grace,
        )
        await _give_up_queued(producer)
    await producer.stop()


async def _give_up_queued(producer: AIOKafkaProducer) -> None:
    """aiokafka has no public way to drop what it could not deliver. Its sender, cancelled,
    still awaits its requests in flight (each retried up to the delivery timeout), so it is
    cancelled until it is gone; only then are the queued batches failed, as failing a batch
    a request still holds makes the sender's retry trip over it."""
    sender = producer._sender.sender_task
    while sender is not None and not sender.done():
        sender.cancel()
        await asyncio.wait([sender], timeout=0.5)
    accumulator = producer._message_accumulator
    queued = [b for queue in accumulator._batches.values() for b in queue]
    # A batch sent once and queued again for a retry still has the callback that drops it
    # from the pending set when it ends: it must be in that set when it fails.
    accumulator._pending_batches.update(queued)
    batches = list(accumulator._pending_batches)
    accumulator.fail_all(KafkaConnectionError("the producer closed before a broker took it"))
    for batch in batches:  # their senders were told; keep asyncio from logging them again
        for future in (batch.future, *(f for f, _ in batch._msg_futures)):
            if future.done() and not future.cancelled():
                future.exception()
