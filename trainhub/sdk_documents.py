"""The job a client call is given, as the document it submits: a mapping or a YAML/JSON
file, with the call's name, namespace and queue put in and trainhub as its manager."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from schemas.job_controls import TRAINJOB_KIND, controls_path, job_controls
from schemas.job_parsing import load_documents, read_text
from schemas.run_policy import TRAINHUB_MANAGER

JobSource = Mapping[str, Any] | str | Path
"""A job document, or the path of a YAML/JSON file holding one."""


def job_document(
    job: JobSource,
    *,
    name: str | None,
    namespace: str | None,
    queue: str | None,
    default: str | None = None,
) -> dict[str, Any]:
    """The job as a document with the overrides; `default`: the namespace of a document
    that names none (the client's, as upstream creates it in)."""
    if isinstance(job, str | Path):
        path = Path(job)
        documents = load_documents(read_text(path), str(path))
        if len(documents) != 1 or not isinstance(documents[0], dict):
            raise ValueError(f"{path}: expected exactly one job document")
        document: dict[str, Any] = documents[0]
    elif isinstance(job, Mapping):
        document = copy.deepcopy(dict(job))
    else:
        raise ValueError(f"job: a job document (mapping) or a file path (got {type(job).__name__})")
    metadata = document.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError("metadata: expected a mapping")
    if name is not None:
        metadata["name"] = name
    if namespace is not None:
        metadata["namespace"] = namespace
    elif default is not None and not metadata.get("namespace"):
        metadata["namespace"] = default
    spec = document.setdefault("spec", {})
    if not isinstance(spec, dict):
        raise ValueError("spec: expected a mapping")
    run_policy = job_controls(document)
    if run_policy is None:
        raise ValueError(f"{controls_path(document.get('kind'))}: expected a mapping")
    # Given to the trainhub SDK, the job is meant for trainhub; another manager set on
    # purpose is respected (the hub then records the job and leaves it alone).
    run_policy.setdefault("managedBy", TRAINHUB_MANAGER)
    if queue is not None and document.get("kind") == TRAINJOB_KIND:
        raise ValueError(
            "queue: a TrainJob has no runPolicy.schedulingPolicy to name a queue in; "
            "submit it without one (it goes to the default queue)"
        )
    if queue is not None:
        scheduling = run_policy.setdefault("schedulingPolicy", {})
        if not isinstance(scheduling, dict):
            raise ValueError("spec.runPolicy.schedulingPolicy: expected a mapping")
        scheduling["queue"] = queue
    return document
