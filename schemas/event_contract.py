"""The published event contract: every event type with its payload model, topics, keys,
writers and readers, exported as JSON Schemas and `docs/events.md`
(`python -m schemas.event_contract [--check] [DOCS_DIR]`; tests/schemas compares them)."""

from __future__ import annotations

import argparse
import builtins
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from schemas.cluster import ClusterSnapshot
from schemas.events import (
    CloudEvent,
    ClusterRetired,
    EventType,
    HubLeader,
    JobAssigned,
    JobHandedBack,
    JobRef,
    JobRevoked,
    JobStatusUpdate,
    JobSubmitted,
    JobUpdated,
    LogsChunk,
    LogsRequested,
    PodsListed,
    PodsRequested,
    RuntimeApplied,
)
from schemas.kubeflow import JOB_CLASSES

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE = "https://trainhub.io/schemas/events/"


@dataclass(frozen=True)
class Route:
    """Where one event type travels: a topic (with `<prefix>` and `<cluster>` as written in
    bus/topics.py), the record key, who writes it and who reads it."""

    topic: str
    key: str
    writer: str
    readers: str


@dataclass(frozen=True)
class EventSpec:
    type: str
    payload: builtins.type[BaseModel]
    summary: str
    routes: tuple[Route, ...]

    @property
    def schema_file(self) -> str:
        return f"{self.type}.json"


_HUB = "the leading hub"
_BY_UID = "the job's uid"

EVENTS: tuple[EventSpec, ...] = (
    EventSpec(
        EventType.JOB_SUBMITTED,
        JobSubmitted,
        "A new job: `job` is the Kubeflow v1 document as written (the hub validates it; an "
        "invalid one is answered `Rejected` and dead-lettered).",
        (Route("<prefix>.jobs", _BY_UID, "any producer", "the hub"),),
    ),
    EventSpec(
        EventType.JOB_UPDATED,
        JobUpdated,
        "A job's new document, replacing its whole spec; one whose pods exist may only be "
        "suspended or resumed (a refused update is dead-lettered with the reason).",
        (Route("<prefix>.jobs", _BY_UID, "any producer", "the hub"),),
    ),
    EventSpec(
        EventType.JOB_DELETED,
        JobRef,
        "Delete a job wherever it runs. For a uid the hub does not know: dead-lettered.",
        (Route("<prefix>.jobs", _BY_UID, "any producer", "the hub"),),
    ),
    EventSpec(
        EventType.JOB_SUSPENDED,
        JobRef,
        "Suspend a job (its pods are removed, its place kept). On the jobs topic from a "
        "producer (unknown uid: dead-lettered); on an assignments topic, passed on by the hub.",
        (
            Route("<prefix>.jobs", _BY_UID, "any producer", "the hub"),
            Route("<prefix>.assignments.<cluster>", _BY_UID, _HUB, "that cluster's worker"),
        ),
    ),
    EventSpec(
        EventType.JOB_RESUMED,
        JobRef,
        "Resume a suspended job; as `job.suspended`.",
        (
            Route("<prefix>.jobs", _BY_UID, "any producer", "the hub"),
            Route("<prefix>.assignments.<cluster>", _BY_UID, _HUB, "that cluster's worker"),
        ),
    ),
    EventSpec(
        EventType.JOB_ASSIGNED,
        JobAssigned,
        "The hub placed a job's attempt on a cluster: that cluster's worker runs it.",
        (Route("<prefix>.assignments.<cluster>", _BY_UID, _HUB, "that cluster's worker"),),
    ),
    EventSpec(
        EventType.JOB_REVOKED,
        JobRevoked,
        "Remove what a cluster runs of a job's attempt (deleted, moved or updated).",
        (Route("<prefix>.assignments.<cluster>", _BY_UID, _HUB, "that cluster's worker"),),
    ),
    EventSpec(
        EventType.JOB_HANDED_BACK,
        JobHandedBack,
        "A worker gives a job's attempt back to be placed again (its cluster cannot run it).",
        (Route("<prefix>.reports.<cluster>", _BY_UID, "that cluster's worker", "the hub"),),
    ),
    EventSpec(
        EventType.JOB_STATUS,
        JobStatusUpdate,
        "A step of a job's lifecycle. Workers report on their own cluster's reports topic; the "
        "hub writes its own and passes the reports it accepts on, byte for byte, to the status "
        "topic (one writer of the truth). `attempt` and `sequence` order them.",
        (
            Route("<prefix>.reports.<cluster>", _BY_UID, "that cluster's worker", "the hub"),
            Route("<prefix>.status", _BY_UID, _HUB, "anyone (CLI, SDK, dashboards)"),
        ),
    ),
    EventSpec(
        EventType.CLUSTER_HEARTBEAT,
        ClusterSnapshot,
        "A member cluster's capacity: nodes, what they hold, pods by job.",
        (
            Route("<prefix>.reports.<cluster>", "the cluster's name", "its worker", "the hub"),
            Route("<prefix>.clusters", "the cluster's name", _HUB, "anyone"),
        ),
    ),
    EventSpec(
        EventType.CLUSTER_RETIRED,
        ClusterRetired,
        "An operator removed a member cluster whose worker is gone (`trainhub retire-cluster`).",
        (Route("<prefix>.clusters", "the cluster's name", "an operator", "the hub, anyone"),),
    ),
    EventSpec(
        EventType.LOGS_REQUESTED,
        LogsRequested,
        "Asks the worker of a job's cluster for its pods' logs.",
        (Route("<prefix>.assignments.<cluster>", _BY_UID, "any reader", "that cluster's worker"),),
    ),
    EventSpec(
        EventType.LOGS_CHUNK,
        LogsChunk,
        "A piece of a pod's log, answering a `logs.requested`; `final` ends the answer.",
        (Route("<prefix>.logs", "the request id", "a worker", "who asked"),),
    ),
    EventSpec(
        EventType.PODS_REQUESTED,
        PodsRequested,
        "Asks the worker of a job's cluster for the phase of each of its pods.",
        (Route("<prefix>.assignments.<cluster>", _BY_UID, "any reader", "that cluster's worker"),),
    ),
    EventSpec(
        EventType.PODS_LISTED,
        PodsListed,
        "The job's pods as the worker knows them (name, phase, node, start time), answering a "
        "`pods.requested`; one event per answer.",
        (Route("<prefix>.logs", "the request id", "a worker", "who asked"),),
    ),
    EventSpec(
        EventType.HUB_LEADER,
        HubLeader,
        "A hub took the lead; written first on every topic it writes. Readers refuse what a "
        "hub of an older epoch (`ce_epoch`) writes after it.",
        (
            Route("<prefix>.assignments.<cluster>", "`leader`", _HUB, "workers"),
            Route("<prefix>.status", "`leader`", _HUB, "anyone"),
            Route("<prefix>.clusters", "`leader`", _HUB, "anyone"),
        ),
    ),
    EventSpec(
        EventType.RUNTIME_APPLIED,
        RuntimeApplied,
        "A TrainJob runtime an operator applied (`trainhub runtime apply`): `runtime` is the "
        "(Cluster)TrainingRuntime document. A tombstone (no value) of its key deletes it; the "
        "topic is compacted, so it holds the newest of each. The hub validates it again and "
        "dead-letters one that is invalid.",
        (
            Route(
                "<prefix>.runtimes",
                "`KIND/NAMESPACE/NAME` (NAMESPACE empty for a ClusterTrainingRuntime)",
                "an operator (the hub's user)",
                "the hub, anyone",
            ),
        ),
    ),
)


def event_schema(spec: EventSpec) -> dict[str, Any]:
    """The JSON Schema of one event type's body (the CloudEvent's `data`)."""
    schema = spec.payload.model_json_schema(mode="validation")
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": f"{SCHEMA_BASE}{spec.schema_file}",
        **schema,
        "title": spec.type,
        "description": spec.summary,
    }


def envelope_schema() -> dict[str, Any]:
    """The CloudEvent attributes, carried as `ce_*` headers (binary mode)."""
    schema = CloudEvent.model_json_schema(mode="validation")
    schema["properties"].pop("data", None)
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": f"{SCHEMA_BASE}cloudevent.json",
        **schema,
        "title": "CloudEvent attributes (ce_* headers)",
        "description": "Each attribute is a Kafka header `ce_<name>` (UTF-8 text); "
        "`datacontenttype` is the `content-type` header. The body is the event's data.",
    }


# --- docs/events.md ---------------------------------------------------------------------------

_HEAD = """# The event contract

<!-- Generated by `python -m schemas.event_contract` from the pydantic models in schemas/;
tests/schemas/test_event_contract.py fails when this file or docs/schemas/ differ. -->

Everything trainhub does travels as [CloudEvents 1.0](https://cloudevents.io) on Kafka in
**binary mode**: the attributes are record headers, the body is the event's `data` as one JSON
object (UTF-8, at most 4 MiB). Any client can produce and read them; none needs trainhub's code
(see [examples/raw-producer](../examples/raw-producer/)).

## Headers

| header | required | value |
|---|---|---|
| `ce_specversion` | yes | `1.0` |
| `ce_id` | yes | unique per event (a UUID); a run's statuses carry its submission's id |
| `ce_source` | yes | who wrote it, 1-256 characters (e.g. `my-team/pipeline`) |
| `ce_type` | yes | one of the types below, e.g. `io.trainhub.job.submitted` |
| `ce_subject` | no | what it is about (trainhub writes the record key) |
| `ce_time` | no | RFC 3339 time; the reader's clock when absent |
| `ce_epoch` | hubs only | the hub's epoch: readers refuse an older one after a newer |
| `content-type` | no | `application/json` |

Schemas: [cloudevent.json](schemas/cloudevent.json) for the attributes, one file per event
type under [schemas/](schemas/) for its body, and the Kubeflow v1 job documents the hub accepts
in a `job` field under [schemas/jobs/](schemas/jobs/) (`PyTorchJob.json`, `TFJob.json`, ...).

A `job.submitted` record, as the console producer of
[examples/raw-producer](../examples/raw-producer/) writes it:

```
headers  ce_specversion=1.0  ce_id=0b7e...  ce_source=my-team/pipeline
         ce_type=io.trainhub.job.submitted  content-type=application/json
key      4c1f0d8e-...  (the job's uid, below)
body     {"job": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
          "metadata": {"name": "mnist", "namespace": "default"}, "spec": {...}}}
```

and a delete of that job: `ce_type=io.trainhub.job.deleted`, the same key, body
`{"uid": "4c1f0d8e-..."}`.

## Keys and topics

Topic names start with the deployment's prefix (`trainhub` unless `--prefix` /
`TRAINHUB_PREFIX` says otherwise). The key orders a job's events: everything about a job is
keyed by its **uid**, which is `metadata.uid` when the document sets one and otherwise the
UUID version 5 of `<namespace>/<name>` in the namespace `6f1d4c62-3f0e-4b8e-9a53-9d7a1f2f7a10`
(`namespace` defaults to `default`), so a delete or suspend lands behind its job's submission.

Producers write only the jobs topic. Each worker writes only its own cluster's reports topic;
the hub checks what each report speaks for and passes what it accepts on to the status and
clusters topics, which hubs alone write (one writer of the truth). `<prefix>.hubstate` and
`<prefix>.leader` are the hubs' own and not part of this contract; `<prefix>.runtimes` (TrainJob
runtimes) is written by operators, as the hub's user, and read by the hub and by clients;
`<prefix>.deadletter` holds every record nobody could use, with the reason in the
`trainhub_dlq_reason` header.

## What the hub does with what producers send

- A `job.submitted` whose body or job document is invalid: dead-lettered with the reason, and
  answered `Rejected` on the status topic when the document names its job.
- `job.deleted`, `job.suspended`, `job.resumed` for a uid the hub does not know, an event type
  other than the five below, a record without the required headers, or a body that is not a
  JSON object of the type's schema: dead-lettered with the reason (and logged, and counted in
  `trainhub_dead_letters_total{component="hub"}`); nothing else happens.

| type | topic | key | writer | readers |
|---|---|---|---|---|
"""


def _type_text(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in prop:
        return " or ".join(_type_text(p) for p in prop["anyOf"])
    if "allOf" in prop and len(prop["allOf"]) == 1:
        return _type_text(prop["allOf"][0])
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type_text(prop.get('items', {}))}"
    if kind == "string" and prop.get("format"):
        return f"string ({prop['format']})"
    return str(kind or "any")


def _fields_table(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    lines = ["| field | type | required | notes |", "|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        notes = " ".join(str(prop.get("description", "")).split())
        limits = [
            f"{word} {prop[key]}"
            for key, word in (
                ("minLength", "min length"),
                ("maxLength", "max length"),
                ("minimum", "at least"),
                ("pattern", "pattern"),
            )
            if key in prop
        ]
        if limits:
            notes = "; ".join([*limits, notes] if notes else limits)
        cells = [f"`{name}`", _type_text(prop), "yes" if name in required else "no"]
        lines.append("| " + " | ".join([*cells, notes.replace("|", "\\|")]) + " |")
    return lines


def events_markdown() -> str:
    lines = [_HEAD.rstrip("\n")]
    for spec in EVENTS:
        for route in spec.routes:
            lines.append(
                f"| [`{spec.type}`](#{_anchor(spec.type)}) | `{route.topic}` | {route.key} | "
                f"{route.writer} | {route.readers} |"
            )
    for spec in EVENTS:
        lines += ["", f"## {spec.type}", "", spec.summary, ""]
        lines.append(
            f"Body: [{spec.payload.__name__}](schemas/{spec.schema_file}) "
            f"(`{spec.payload.__module__}.{spec.payload.__name__}`)."
        )
        lines += ["", *_fields_table(spec.payload.model_json_schema(mode="validation"))]
    return "\n".join(lines) + "\n"


def _anchor(title: str) -> str:
    return title.replace(".", "")


# --- files ------------------------------------------------------------------------------------


def contract_files() -> dict[str, str]:
    """Every generated file, by its path under the docs folder, with its text."""
    files = {"events.md": events_markdown()}
    files["schemas/cloudevent.json"] = _json(envelope_schema())
    for spec in EVENTS:
        files[f"schemas/{spec.schema_file}"] = _json(event_schema(spec))
    for kind, model in JOB_CLASSES.items():
        files[f"schemas/jobs/{kind}.json"] = _json(
            {
                "$schema": SCHEMA_DIALECT,
                "$id": f"{SCHEMA_BASE}jobs/{kind}.json",
                **model.model_json_schema(mode="validation"),
                "title": f"kubeflow.org/v1 {kind}",
            }
        )
    return files


def _json(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def stale_files(docs: Path) -> list[str]:
    """The generated files missing from `docs` or differing from the models."""
    return [
        path
        for path, text in contract_files().items()
        if not (docs / path).is_file() or (docs / path).read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m schemas.event_contract", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("docs", nargs="?", default="docs", type=Path, help="default: docs")
    parser.add_argument("--check", action="store_true", help="only say what is out of date")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.docs)
        for path in stale:
            print(f"{args.docs / path} is out of date", file=sys.stderr)
        return 1 if stale else 0
    for path, text in contract_files().items():
        target = args.docs / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
