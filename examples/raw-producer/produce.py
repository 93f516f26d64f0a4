"""Submit, delete, suspend or resume a trainhub job with plain aiokafka: no trainhub import.

    python produce.py --bootstrap localhost:9092 submit job.yaml    # or job.json
    python produce.py --bootstrap localhost:9092 delete default/mnist

Each event is a CloudEvent in Kafka's binary mode (attributes as `ce_*` headers, the data as
the JSON body), keyed by the job's uid, on `<prefix>.jobs`: docs/events.md is the contract.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

JOB_UID_NAMESPACE = uuid.UUID("6f1d4c62-3f0e-4b8e-9a53-9d7a1f2f7a10")
SOURCE = "examples/raw-producer"


def job_uid(document: dict[str, Any]) -> str:
    """metadata.uid if the document sets one, else the UUID v5 of '<namespace>/<name>'."""
    meta = document["metadata"]
    if meta.get("uid"):
        return str(meta["uid"])
    return uid_of(meta.get("namespace", "default"), meta["name"])


def uid_of(namespace: str, name: str) -> str:
    return str(uuid.uuid5(JOB_UID_NAMESPACE, f"{namespace}/{name}"))


def cloudevent_headers(event_type: str, subject: str) -> list[tuple[str, bytes]]:
    attributes = {
        "ce_specversion": "1.0",
        "ce_id": str(uuid.uuid4()),
        "ce_source": SOURCE,
        "ce_type": event_type,
        "ce_subject": subject,
        "ce_time": datetime.now(UTC).isoformat(),
        "content-type": "application/json",
    }
    return [(name, value.encode()) for name, value in attributes.items()]


async def send(bootstrap: str, topic: str, event_type: str, uid: str, data: dict[str, Any]) -> str:
    """Publish one event (acks from all in-sync replicas); returns its event id."""
    headers = cloudevent_headers(event_type, uid)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            topic, json.dumps(data).encode(), key=uid.encode(), headers=headers
        )
    finally:
        await producer.stop()
    return dict(headers)["ce_id"].decode()


async def submit(bootstrap: str, prefix: str, document: dict[str, Any]) -> str:
    """`io.trainhub.job.submitted` with body {"job": document}; returns the job's uid."""
    uid = job_uid(document)
    await send(bootstrap, f"{prefix}.jobs", "io.trainhub.job.submitted", uid, {"job": document})
    return uid


async def request(bootstrap: str, prefix: str, action: str, uid: str) -> None:
    """`io.trainhub.job.deleted` / `suspended` / `resumed` with body {"uid": uid}."""
    event_type = {"delete": "deleted", "suspend": "suspended", "resume": "resumed"}[action]
    await send(bootstrap, f"{prefix}.jobs", f"io.trainhub.job.{event_type}", uid, {"uid": uid})


def read_document(path: str) -> dict[str, Any]:
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    if text.lstrip().startswith("{"):
        return dict(json.loads(text))
    import yaml  # only for YAML files

    return dict(yaml.safe_load(text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--prefix", default="trainhub")
    parser.add_argument("action", choices=["submit", "delete", "suspend", "resume"])
    parser.add_argument("target", help="submit: a job file (- for stdin); else NAMESPACE/NAME")
    args = parser.parse_args()
    if args.action == "submit":
        uid = asyncio.run(submit(args.bootstrap, args.prefix, read_document(args.target)))
    else:
        namespace, _, name = args.target.rpartition("/")
        uid = uid_of(namespace or "default", name)
        asyncio.run(request(args.bootstrap, args.prefix, args.action, uid))
    print(uid)


if __name__ == "__main__":
    main()
