"""What a worker's answering of requests (a job's logs, its pods' phases) has in common: they
come on the cluster's assignments topic, each is answered on the logs topic keyed by its
request id, by a task of its own so that the assignments consumer is never held up."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import ClassVar, Generic, TypeVar

from bus.aiotasks import TaskOwner
from bus.base import Bus
from bus.topics import Topics
from schemas.events import LogsRequested, PodsRequested
from workers.backends.base import Backend
from workers.job_run import JobRun

log = logging.getLogger(__name__)

RequestT = TypeVar("RequestT", bound=LogsRequested | PodsRequested)


class RequestAnswering(ABC, Generic[RequestT]):
    """One task per request, owned here and cancelled by `close`. A request seen after its
    deadline (a redelivery after a restart, or one that waited too long) is dropped: nobody
    reads the answer any more."""

    kind: ClassVar[str]
    """What is asked for, in log lines and task names: `log`, `pod`."""

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        backend: Backend,
        runs: Mapping[str, JobRun],
        *,
        cluster: str,
        source: str,
    ) -> None:
        self._bus = bus
        self._topics = topics
        self._backend = backend
        self._runs = runs
        self._cluster = cluster
        self._source = source
        self._tasks = TaskOwner(f"{self.kind}s-{cluster}")

    def handle(self, request: RequestT) -> None:
        """Start answering; returns at once."""
        if request.deadline <= datetime.now(UTC):
            log.info("expired %s request dropped", self.kind, extra=self._extra(request))
            return
        self._tasks.spawn(self._answer(request), f"{self.kind}s-{request.request_id}")

    async def close(self) -> None:
        await self._tasks.cancel_all()

    def _extra(self, request: RequestT) -> dict[str, str]:
        return {"cluster": self._cluster, "job": request.uid, "event": request.request_id}

    @abstractmethod
    async def _answer(self, request: RequestT) -> None:
        """Answer it, an error included: the requester must hear, whatever broke."""
