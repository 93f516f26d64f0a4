"""The interface of a backend in delegate mode: it hands each job whole to an operator running
in its cluster (the job's own object there, which that operator reconciles) instead of making
the job's pods, and reports what the operator writes into that object's status.

No cluster library is imported here: the worker depends on this interface, the kube backend
(kube_delegate.py) implements it."""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass
from typing import Any

from schemas.kubeflow import AnyJob


@dataclass(frozen=True)
class DelegatedStatus:
    """The status an operator wrote into a delegated job's object, as last seen."""

    job_uid: str
    attempt: int | None
    """The trainhub attempt the object was created for (its label), when it has one."""
    status: dict[str, Any] | None
    """The object's `.status`; None once the object is gone."""


class DelegatingBackend(abc.ABC):
    """Create, suspend, resume and delete a job through its object; its status changes arrive
    in `job_statuses`. Mixed into a `Backend` whose `delete_job` deletes the object too."""

    job_statuses: asyncio.Queue[DelegatedStatus]

    @abc.abstractmethod
    async def create_job_object(self, job: AnyJob, attempt: int) -> None:
        """Create the job's object for the operator, or accept that this job's exists (one of
        that name that is not this job's is refused for good)."""

    @abc.abstractmethod
    async def suspend_job_object(self, job: AnyJob, suspend: bool) -> None:
        """Ask the operator to suspend the job (delete its pods) or to resume it."""

    def delegates(self, job: AnyJob) -> str | None:
        """None when the operator runs jobs of this kind; else why not."""
        return None
