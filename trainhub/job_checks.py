"""What the CLI and the SDK check before a job leaves the user: the schema (`parse_job`) and
the constraints the hub would refuse whatever the clusters (dispatcher/demand.py `problem`:
malformed nodeAffinity, cluster-selector annotations, no replica at all)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dispatcher.demand import profile_job
from schemas.errors import ContractError, JobInvalid
from schemas.job_parsing import load_documents, names_of, parse_job, read_text
from schemas.kubeflow import AnyJob
from schemas.trainer_runtimes import RuntimeCatalog
from schemas.trainjob import UNKNOWN_RUNTIME


def check_job(job: AnyJob) -> AnyJob:
    """The job, or JobInvalid with the reason the hub would reject it for."""
    problem = profile_job(job).problem
    if problem is not None:
        raise JobInvalid(f"{job.kind}: {problem}")
    return job


def validate_job(document: Any, runtimes: RuntimeCatalog | None = None) -> AnyJob:
    """`parse_job` and `check_job` in one; `runtimes`: where a TrainJob finds its runtime
    (default: this process's catalog; `bus.runtimes.read_runtimes` adds the bus's)."""
    return check_job(parse_job(document, runtimes))


def unknown_runtime(problems: Iterable[str]) -> bool:
    """Whether a TrainJob was refused for a runtime this process does not know: one an
    operator applied on the bus may be it."""
    return any(UNKNOWN_RUNTIME in problem for problem in problems)


@dataclass
class JobFiles:
    """The valid jobs of some files, and what is wrong with each document that is not one."""

    jobs: list[AnyJob] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _document_name(path: Path, index: int, count: int, document: Any) -> str:
    """`file` for a file's only document, else `file, document N`; with the kind and the
    namespace/name the document gives itself, when it gives them."""
    shown = _origin(path)
    where = shown if count == 1 else f"{shown}, document {index}"
    names = names_of(document)
    name = names.get("name")
    named = f"{names.get('namespace', 'default')}/{name}" if name else None
    said = " ".join(part for part in (names.get("kind"), named) if part)
    return f"{where} ({said})" if said else where


def _origin(path: Path) -> str:
    """How a file is named in problems (`-`: stdin)."""
    return "<stdin>" if str(path) == "-" else str(path)


def read_job_files(
    paths: Iterable[Path],
    texts: Mapping[Path, str] | None = None,
    runtimes: RuntimeCatalog | None = None,
) -> JobFiles:
    """Every job of the files that the hub would accept, checked one document at a time: a
    bad document (or an unreadable file) is a problem of its own, named by file, position,
    kind and name, and hides none of the others. `texts`: paths already read (stdin)."""
    found = JobFiles()
    for path in paths:
        try:
            text = texts[path] if texts is not None and path in texts else read_text(path)
            documents = load_documents(text, _origin(path))
        except ContractError as exc:
            found.problems.append(str(exc))
            continue
        if not documents:
            found.problems.append(f"{_origin(path)}: no job document found")
        for index, document in enumerate(documents, start=1):
            try:
                found.jobs.append(validate_job(document, runtimes))
            except ContractError as exc:
                named = _document_name(path, index, len(documents), document)
                found.problems.append(f"{named}: {exc}")
    return found
