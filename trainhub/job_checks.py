"""What the CLI and the SDK check before a job leaves the user: the schema (`parse_job`) and
the constraints the hub would refuse whatever the clusters (dispatcher/demand.py `problem`:
malformed nodeAffinity, cluster-selector annotations, no replica at all)."""

from __future__ import annotations

from typing import Any

from dispatcher.demand import profile_job
from schemas.errors import JobInvalid
from schemas.job_parsing import parse_job
from schemas.kubeflow import AnyJob


def check_job(job: AnyJob) -> AnyJob:
    """The job, or JobInvalid with the reason the hub would reject it for."""
    problem = profile_job(job).problem
    if problem is not None:
        raise JobInvalid(f"{job.kind}: {problem}")
    return job


def validate_job(document: Any) -> AnyJob:
    """`parse_job` and `check_job` in one."""
    return check_job(parse_job(document))
