"""Kubeflow documents as `trainhub.training_models` objects and back: `from_document` reads
one (camelCase, as the status topic holds it), timestamps as datetimes; `to_document` writes
one, as upstream's `ApiClient.sanitize_for_serialization` does (None left out, keys as the
apiserver spells them). Keys no class declares are kept, so a document read and written again
is the same."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from trainhub.training_models import (
    JOB_MODELS,
    LIST,
    MAP,
    ONE,
    Model,
    Object,
    camel,
    names,
    snake,
)

_MAPS = frozenset(
    names(
        "labels annotations node_selector limits requests min_resources match_labels data "
        "binary_data string_data volume_attributes capacity allocatable"
    )
)
"""Attributes whose values are plain mappings: their keys are data, never renamed."""
_TIMES = frozenset(
    names(
        "creation_timestamp deletion_timestamp last_transition_time last_update_time "
        "last_reconcile_time start_time completion_time started_at finished_at"
    )
)


def from_document(document: Mapping[str, Any], cls: type[Model] | None = None) -> Any:
    """A Kubeflow document as its job model (`cls` None: the model of its `kind`)."""
    if cls is None:
        kind = document.get("kind")
        cls = JOB_MODELS.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise ValueError(f"kind: one of {', '.join(JOB_MODELS)} (got {kind!r})")
    return _read(cls, document)


def _read(cls: type[Model], document: Mapping[str, Any]) -> Model:
    model = cls.__new__(cls)
    object.__setattr__(model, "_keys", {})
    for field in cls._fields:
        setattr(model, field, None)
    for key, value in document.items():
        attribute = snake(str(key))
        if camel(attribute) != key:
            model._keys[attribute] = key
        setattr(model, attribute, _read_value(cls, attribute, value))
    return model


def _read_value(cls: type[Model], attribute: str, value: Any) -> Any:
    child = cls._children.get(attribute)
    if child is not None and value is not None:
        kind, shape = child
        if shape == ONE and isinstance(value, Mapping):
            return _read(kind, value)
        if shape == LIST and isinstance(value, list):
            return [_read(kind, v) if isinstance(v, Mapping) else v for v in value]
        if shape == MAP and isinstance(value, Mapping):
            return {k: _read(kind, v) if isinstance(v, Mapping) else v for k, v in value.items()}
    if attribute in _MAPS and isinstance(value, Mapping):
        return dict(value)
    if attribute in _TIMES and isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, Mapping):
        return _read(Object, value)
    if isinstance(value, list):
        return [_read(Object, v) if isinstance(v, Mapping) else v for v in value]
    return value


def to_document(value: Any) -> Any:
    """A model (these, or kubernetes'/kubeflow's own) as the apiserver's JSON: camelCase keys,
    None attributes left out, datetimes as RFC 3339."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, list | tuple):
        return [to_document(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_document(v) for k, v in value.items()}
    if isinstance(value, Model):
        keys: dict[str, str] = value._keys
        return {
            keys.get(k) or camel(k): to_document(v)
            for k, v in value.attributes().items()
            if v is not None
        }
    names = getattr(value, "attribute_map", None)
    if isinstance(names, Mapping) and hasattr(value, "openapi_types"):  # their own models
        return {
            names[k]: to_document(getattr(value, k))
            for k in value.openapi_types
            if getattr(value, k, None) is not None
        }
    raise ValueError(f"{type(value).__name__} is not a model or a JSON value")
