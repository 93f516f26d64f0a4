"""A producer process that offers jobs at a fixed rate, as a fleet of pipelines would: none
waits for another's ack. Writes `{uid: submission CloudEvent time}` as JSON when done.

Usage: python -m bench.offer_jobs --bootstrap HOST:PORT --prefix P --rate R --seconds S --out F
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from pathlib import Path

from bench.hub_throughput import job, submit_document_nowait
from bus.kafka import KafkaBus
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from schemas.job_parsing import job_uid_of
from trainhub.logs import setup_logging


async def offer(bootstrap: str, prefix: str, rate: float, seconds: float) -> dict[str, float]:
    bus = KafkaBus(KafkaSettings(bootstrap=bootstrap))
    await bus.start()
    topics = Topics(prefix=prefix)
    run = uuid.uuid4().hex[:6]
    submitted: dict[str, float] = {}
    try:
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            document = job(i, run)
            submitted[job_uid_of(document) or ""] = await submit_document_nowait(
                bus, topics, document
            )
        await bus.flush()
    finally:
        await bus.close()
    return submitted


def main() -> None:
    setup_logging()  # trainhub's filters: aiokafka's self-retried errors are not failures
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    submitted = asyncio.run(offer(args.bootstrap, args.prefix, args.rate, args.seconds))
    args.out.write_text(json.dumps(submitted))


if __name__ == "__main__":
    main()
