"""The dashboard/rules check on a real deployment's shape: `trainhub hub` and `trainhub worker`
as separate processes on a real Kafka broker, each with its own /metrics; together their
pages must serve every query."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from tests.deploy.workload import run_workload, scrape_until, settled, unserved_queries
from tests.kafka.processes import Process

pytestmark = pytest.mark.kafka


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_hub_and_worker_processes_serve_every_query(
    kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    common = ["--bootstrap", kafka_settings.bootstrap, "--topic-prefix", topics.prefix]
    ports = {"hub": _free_port(), "worker": _free_port()}
    hub = Process("hub", ["hub", *common, "--metrics-port", str(ports["hub"])], tmp_path)
    worker_args = ["--cluster", "east", "--backend", "sim", "--heartbeat-interval", "0.5"]
    worker = Process(
        "worker",
        ["worker", *common, *worker_args, "--metrics-port", str(ports["worker"])],
        tmp_path,
    )
    urls = [f"http://127.0.0.1:{port}/metrics" for port in ports.values()]
    bus = KafkaBus(kafka_settings)
    try:
        # Each serves /metrics once started (topics created, state rebuilt).
        await scrape_until(urls, lambda scrape: True, timeout=60)
        await bus.start()
        await run_workload(bus, topics, junk_for="east")
        scrape = await scrape_until(urls, settled, timeout=60)
        problems = unserved_queries(scrape)
        assert not problems, "\n".join(problems)
        lag = "trainhub_bus_consumer_lag"
        assert scrape.has(lag, component="hub", topic=topics.jobs)
        assert scrape.has(lag, component="worker", topic=topics.assignments("east"))
    finally:
        await bus.close()
        for process in (worker, hub):
            assert process.terminate() in (0, -15), process.log()[-2000:]
