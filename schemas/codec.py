"""CloudEvents Kafka binding, binary mode: attributes in `ce_*` headers, the data as JSON body."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from schemas.errors import EventDecodeError, describe_validation_error
from schemas.events import SPEC_VERSION, CloudEvent, new_event_id

Headers = Sequence[tuple[str, bytes]]
_ATTRIBUTES = ("specversion", "id", "source", "type", "subject", "time", "epoch")
MAX_BODY_BYTES = 4 * 1024 * 1024


def encode_event(event: CloudEvent) -> tuple[list[tuple[str, bytes]], bytes]:
    headers = [("content-type", event.datacontenttype.encode())]
    for name in _ATTRIBUTES:
        value = getattr(event, name)
        if value is None:
            continue
        text = value.isoformat() if isinstance(value, datetime) else str(value)
        headers.append((f"ce_{name}", text.encode()))
    # pydantic-core's encoder: compact UTF-8 JSON, several times faster than json.dumps.
    body = to_json(event.data, fallback=str)
    return headers, body


_EVENT_TYPE = re.compile(r"io\.trainhub\.[a-z.]+")
_JSON = b"application/json"
_SPEC_VERSION = SPEC_VERSION.encode()


def encode_payload(
    event_type: str, source: str, subject: str, payload: BaseModel, epoch: int | None = None
) -> tuple[list[tuple[str, bytes]], bytes]:
    """`encode_event(make_event(event_type, source, subject, payload))` in one step, with the
    same headers and body bytes (a new id and time): the payload is serialised straight to
    JSON, without the dict and the validated envelope in between, which were most of what
    publishing one of the hub's three events per job cost. ValueError on attributes the
    envelope would refuse."""
    if (
        not _EVENT_TYPE.fullmatch(event_type)
        or len(event_type) > 128
        or not 0 < len(source) <= 256
        or len(subject) > 256
    ):
        raise ValueError(f"invalid CloudEvent attributes: {event_type!r} from {source!r}")
    headers = [
        ("content-type", _JSON),
        ("ce_specversion", _SPEC_VERSION),
        ("ce_id", new_event_id().encode()),
        ("ce_source", source.encode()),
        ("ce_type", event_type.encode()),
        ("ce_subject", subject.encode()),
        ("ce_time", datetime.now(UTC).isoformat().encode()),
    ]
    if epoch is not None:
        headers.append(("ce_epoch", str(epoch).encode()))
    return headers, to_json(payload)


def header_map(headers: Iterable[tuple[str, bytes | None]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, raw in headers:
        if raw is None:
            continue
        try:
            found[key] = raw.decode()
        except UnicodeDecodeError as exc:
            raise EventDecodeError(f"header {key!r} is not UTF-8") from exc
    return found


def decode_event(headers: Iterable[tuple[str, bytes | None]], body: bytes | None) -> CloudEvent:
    """Rebuild the CloudEvent of one record; raises EventDecodeError with the reason."""
    attrs = header_map(headers)
    if body is None:
        raise EventDecodeError("record has no body")
    if len(body) > MAX_BODY_BYTES:
        raise EventDecodeError(f"body of {len(body)} bytes exceeds {MAX_BODY_BYTES}")
    missing = [a for a in ("specversion", "id", "source", "type") if f"ce_{a}" not in attrs]
    if missing:
        raise EventDecodeError(
            f"missing CloudEvents headers: {', '.join('ce_' + m for m in missing)}"
        )
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        # ValueError covers malformed JSON, bad UTF-8 and integers too long to convert.
        raise EventDecodeError(f"body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise EventDecodeError(f"body must be a JSON object, got {type(data).__name__}")
    fields: dict[str, object] = {a: attrs[f"ce_{a}"] for a in _ATTRIBUTES if f"ce_{a}" in attrs}
    if "content-type" in attrs:
        fields["datacontenttype"] = attrs["content-type"]
    try:
        event = CloudEvent.model_validate({**fields, "data": data})
    except ValidationError as exc:
        raise EventDecodeError(f"invalid CloudEvent: {describe_validation_error(exc)}") from exc
    if event.specversion != "1.0":
        raise EventDecodeError(f"unsupported specversion {event.specversion!r}")
    return event
