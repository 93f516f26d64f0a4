"""Turn raw documents (dicts, YAML, JSON) into validated training jobs, or say exactly why not."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, TypedDict, TypeGuard

import yaml
from pydantic import ValidationError

from schemas.bounded_yaml import load_all_bounded
from schemas.errors import JobInvalid, describe_validation_error
from schemas.kubeflow import JOB_CLASSES, AnyJob, derive_job_uid
from schemas.trainer_runtimes import (
    RuntimeCatalog,
    parse_runtime,
    pinned_catalog,
    runtime_document,
)
from schemas.trainjob import RUNTIMES_CONTEXT, TrainJob
from schemas.validation_hints import misplacement_hint

REMOVED_KINDS = {
    "MXJob": "MXJob was removed in Kubeflow Training Operator v1.9 and is not supported; "
    "port the job to PyTorchJob or JAXJob",
}


def job_uid_of(document: Any) -> str | None:
    """The uid a document would have as a job, when it names itself well enough to tell."""
    if not isinstance(document, dict) or not isinstance(document.get("metadata"), dict):
        return None
    meta = document["metadata"]
    if isinstance(meta.get("uid"), str) and 0 < len(meta["uid"]) <= 128:
        return str(meta["uid"])
    name, namespace = meta.get("name"), meta.get("namespace", "default")
    if isinstance(name, str) and isinstance(namespace, str) and 0 < len(name) <= 253:
        return derive_job_uid(namespace, name)
    return None


class DocumentNames(TypedDict, total=False):
    kind: str
    name: str
    namespace: str


def names_of(document: Any) -> DocumentNames:
    """The kind, name and namespace a document gives itself, those that are short strings:
    what a status about a document that is not a valid job can still call it."""
    found = DocumentNames()
    if not isinstance(document, dict):
        return found
    meta = document.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    kind, name = document.get("kind"), meta.get("name")
    namespace = meta.get("namespace", "default")
    if _short_text(kind):
        found["kind"] = kind
    if _short_text(name):
        found["name"] = name
    if _short_text(namespace):
        found["namespace"] = namespace
    return found


def _short_text(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= 253


MAX_DEPTH = 64
"""Nesting deeper than any real pod spec; deeper documents cannot be serialised again."""
MAX_CONTAINERS = 100_000
"""Mappings and lists in one document: a real job has hundreds. More is a YAML alias bomb
(a kilobyte whose aliases expand to millions of values) or a document no apiserver stores."""


def _shape_problem(document: Any) -> str | None:
    """Why the document is too deep or too large to take in, if it is."""
    # Level by level over containers only: a job is mostly strings, and stepping onto each
    # of them was most of the time parsing took. Aliased (shared) containers count at each
    # place they appear, as they would once serialised.
    level = [document] if isinstance(document, (dict, list)) else []
    seen = len(level)
    for _ in range(MAX_DEPTH):
        below: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            below += [c for c in children if isinstance(c, (dict, list))]
            if seen + len(below) > MAX_CONTAINERS:
                return f"the document holds more than {MAX_CONTAINERS} mappings and lists"
        if not below:
            return None
        seen += len(below)
        level = below
    if any(level):  # a non-empty container at the limit has values below it
        return f"the document is nested deeper than {MAX_DEPTH} levels"
    return None


def parse_job(document: Any, runtimes: RuntimeCatalog | None = None) -> AnyJob:
    """Validate one job document; raises JobInvalid naming the field and the offending value.
    `runtimes`: the catalog a TrainJob's runtimeRef is looked up in (default: this
    process's)."""
    if not isinstance(document, dict):
        raise JobInvalid(f"a job must be a mapping, got {type(document).__name__}")
    problem = _shape_problem(document)
    if problem is not None:
        raise JobInvalid(problem)
    kind = document.get("kind")
    if not isinstance(kind, str):
        raise JobInvalid(f"kind: must be a string (got {str(kind)[:64]!r})")
    if kind in REMOVED_KINDS:
        raise JobInvalid(f"kind: {REMOVED_KINDS[kind]}")
    if kind not in JOB_CLASSES:
        known = ", ".join(sorted(JOB_CLASSES))
        raise JobInvalid(f"kind: unknown kind {kind!r}; trainhub accepts {known}")
    if document.get("apiVersion") != (api_version := JOB_CLASSES[kind].API_VERSION):
        raise JobInvalid(
            f"apiVersion: expected {api_version!r} (got {document.get('apiVersion')!r})"
        )
    try:
        context = {RUNTIMES_CONTEXT: runtimes} if runtimes is not None else None
        return JOB_CLASSES[kind].model_validate(document, context=context)  # type: ignore[return-value]
    except ValidationError as exc:
        raise JobInvalid(f"{kind}: {_describe(exc)}") from exc
    except (ValueError, TypeError) as exc:
        raise JobInvalid(f"{kind}: {exc}") from exc


def parse_placed_job(document: Any, runtime: dict[str, Any] | None) -> AnyJob:
    """A job the hub already resolved: a TrainJob against the runtime the hub carried with it
    (`runtime_of`), whatever this process's catalog holds; without one (a job of another
    kind, or from a hub of before), as `parse_job`."""
    if runtime is None:
        return parse_job(document)
    return parse_job(document, pinned_catalog(parse_runtime(runtime, "the job's runtime")))


def runtime_of(job: AnyJob) -> dict[str, Any] | None:
    """The runtime document a TrainJob was resolved against; None for the other kinds."""
    return runtime_document(job.runtime) if isinstance(job, TrainJob) else None


def _describe(exc: ValidationError) -> str:
    """Whole-document rules already name their field and value; field errors get both added."""
    errors = exc.errors(include_url=False)
    if errors and all(not e["loc"] and e["type"] == "value_error" for e in errors):
        return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in errors)
    return describe_validation_error(exc, hint=misplacement_hint)


def load_documents(text: str, origin: str = "<input>") -> list[Any]:
    """YAML (multi-document) or JSON text to Python objects, a top-level list being a list
    of documents; syntax errors and aliases that expand too far (schemas/bounded_yaml.py)
    become JobInvalid."""
    text = text.removeprefix("\ufeff")
    if text.lstrip().startswith(("{", "[")):
        try:
            loaded = json.loads(text)
            return loaded if isinstance(loaded, list) else [loaded]
        except json.JSONDecodeError:
            pass  # flow-style YAML starts the same way
    stream = io.StringIO(text)
    stream.name = origin  # PyYAML names the stream in its error marks
    try:
        documents = [d for d in load_all_bounded(stream) if d is not None]
    except yaml.YAMLError as exc:
        raise JobInvalid(f"{origin}: not valid YAML or JSON: {exc}") from exc
    if len(documents) == 1 and isinstance(documents[0], list):
        return [d for d in documents[0] if d is not None]
    return documents


def read_text(path: Path) -> str:
    """A job or clusters file's text; JobInvalid naming the file when it cannot be read or
    is not UTF-8."""
    try:
        return path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise JobInvalid(f"{path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise JobInvalid(
            f"{path}: not UTF-8 text (byte {exc.start}): job files are YAML or JSON"
        ) from exc
