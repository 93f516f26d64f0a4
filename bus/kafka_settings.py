"""How to reach a Kafka cluster: bootstrap servers and security (PLAINTEXT, SASL, SSL)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka.conn import AIOKafkaConnection, create_conn

from bus.retry import RetryPolicy

SecurityProtocol = Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"]


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    client_id: str = "trainhub"
    request_timeout_ms: int = 15_000
    connect_attempts: int = 8
    """Attempts (see `connect_retry`) before a broker counts as unreachable at start."""
    outage_timeout_s: float = 120.0
    """How long a started client retries a broker that went away (restart, network cut)
    before the call fails (see `outage_retry`)."""
    delivery_timeout_ms: int = 120_000
    """How long the producer keeps a record it cannot deliver yet (aiokafka also uses it as
    the producer's request timeout)."""

    @property
    def connect_retry(self) -> RetryPolicy:
        """Connecting: 0.2 s doubling up to 10 s, so the default attempts fail a start that
        no broker answers in about 20 s."""
        return RetryPolicy(initial_wait=0.2, max_wait=10.0, attempts=self.connect_attempts)

    @property
    def outage_retry(self) -> RetryPolicy:
        """A started client's calls: 0.2 s doubling up to 5 s, for `outage_timeout_s`."""
        return RetryPolicy(initial_wait=0.2, max_wait=5.0, deadline=self.outage_timeout_s)

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments shared by aiokafka's producer, consumer and admin client."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            "request_timeout_ms": self.request_timeout_ms,
        }
        if self.security_protocol.startswith("SASL"):
            options.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        if self.security_protocol.endswith("SSL"):
            context = ssl.create_default_context(cafile=self.ssl_cafile)
            if self.ssl_certfile:
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
            options["ssl_context"] = context
        return options


async def connect_first_broker(settings: KafkaSettings) -> AIOKafkaConnection:
    """One direct connection to the first bootstrap broker, authenticated as `settings` say
    (for what aiokafka's clients do not offer, or do too slowly)."""
    options = settings.client_options()
    host, _, port = settings.bootstrap.split(",")[0].strip().rpartition(":")
    return await create_conn(
        host,
        int(port),
        client_id=options["client_id"],
        request_timeout_ms=options["request_timeout_ms"],
        ssl_context=options.get("ssl_context"),
        security_protocol=options["security_protocol"],
        sasl_mechanism=options.get("sasl_mechanism"),
        sasl_plain_username=options.get("sasl_plain_username"),
        sasl_plain_password=options.get("sasl_plain_password"),
    )
