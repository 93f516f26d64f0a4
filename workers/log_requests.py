"""Answers `logs.requested` events: a worker reads its pods' logs through the backend and
sends them, in order, as `logs.chunk` events on the logs topic keyed by the request id."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime

from bus.base import Bus
from bus.events import publish_event
from bus.topics import Topics
from schemas.events import EventType, LogsChunk, LogsRequested, make_event
from workers.backends.base import Backend, PodLogsUnavailable
from workers.job_run import JobRun
from workers.request_answering import RequestAnswering

log = logging.getLogger(__name__)

CHUNK_CHARS = 64 * 1024
"""Text per event, far below Kafka's default message limit of 1 MB."""
FOLLOW_INTERVAL = 1.0
"""Seconds between two reads of a followed pod's log."""
MAX_FOLLOW = 3600.0
"""No request is followed longer than this, whatever its deadline says."""


class LogRequests(RequestAnswering[LogsRequested]):
    """A failed read ends the request with an error chunk rather than taking the worker
    down."""

    kind = "log"

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        backend: Backend,
        runs: Mapping[str, JobRun],
        *,
        cluster: str,
        source: str,
        interval: float = FOLLOW_INTERVAL,
        max_follow: float = MAX_FOLLOW,
    ) -> None:
        super().__init__(bus, topics, backend, runs, cluster=cluster, source=source)
        self._interval = interval
        self._max_follow = max_follow

    async def _answer(self, request: LogsRequested) -> None:
        reply = _Reply(self, request)
        try:
            await self._serve(request, reply)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the requester must hear that it ended, whatever broke
            log.warning("log request failed: %s", exc, extra=self._extra(request))
            try:
                await reply.finish(error=f"reading logs on {self._cluster} failed: {exc}")
            except Exception as again:
                log.error("cannot end the log request: %s", again, extra=self._extra(request))

    async def _serve(self, request: LogsRequested, reply: _Reply) -> None:
        run = self._runs.get(request.uid)
        # A job that finished a while ago has no run here any more: its pods, where the
        # cluster still keeps them (cleanPodPolicy None), are found by its label.
        names = (
            sorted(run.pods) if run is not None else await self._backend.job_pod_names(request.uid)
        )
        if not names:
            await reply.finish(error=f"job {request.uid} has no pods on cluster {self._cluster}")
            return
        if request.pod is not None and request.pod not in names:
            name = run.name if run is not None else request.uid
            known = ", ".join(names)
            await reply.finish(error=f"job {name} has no pod {request.pod} (pods: {known})")
            return
        pods = [request.pod] if request.pod is not None else names
        loop = asyncio.get_running_loop()
        left = (request.deadline - datetime.now(UTC)).total_seconds()
        stop_at = loop.time() + min(left, self._max_follow)
        sent = {pod: 0 for pod in pods}
        missing: dict[str, str] = {}
        await self._send_new(request, reply, sent, missing, tail=request.tail_lines)
        if len(missing) == len(pods):
            # Not one pod's log can be read (gone, or a node serving none): that is the
            # answer, an error, rather than nothing or the reasons passed off as log text.
            await reply.finish(error="; ".join(missing[pod] for pod in pods))
            return
        for reason in missing.values():
            log.warning("%s", reason, extra=self._extra(request))
        if reply.seq == 0:
            await reply.send(None, "")  # an acknowledgement: the requester knows we are on it
        while request.follow:
            # Decided before the read, so that read holds everything the pods ever wrote.
            finished = self._finished(request.uid)
            if not finished:
                remaining = stop_at - loop.time()
                if remaining <= 0:
                    break
                await asyncio.sleep(min(self._interval, remaining))
            await self._send_new(request, reply, sent, {}, tail=None)
            if finished:
                break
        await reply.finish()

    def _finished(self, uid: str) -> bool:
        run = self._runs.get(uid)
        return run is None or run.finished or run.suspended

    async def _send_new(
        self,
        request: LogsRequested,
        reply: _Reply,
        sent: dict[str, int],
        missing: dict[str, str],
        *,
        tail: int | None,
    ) -> None:
        """Send what each pod wrote since the last read (a log that shrank belongs to a
        restarted pod: it is sent whole); `missing` gets why a pod's log cannot be read."""
        for pod, offset in sent.items():
            try:
                text = await self._backend.pod_logs(request.uid, pod)
            except PodLogsUnavailable as unavailable:
                missing[pod] = str(unavailable)
                continue
            if len(text) < offset:
                offset = 0
            sent[pod] = len(text)
            new = text[offset:]
            if tail is not None:
                new = last_lines(new, tail)
            await reply.send(pod, new)


def last_lines(text: str, count: int) -> str:
    """The last `count` lines of `text` (a missing final newline still ends a line)."""
    if count == 0:
        return ""
    lines = text.splitlines(keepends=True)
    return "".join(lines[-count:])


class _Reply:
    """The numbered chunks of one answer."""

    def __init__(self, owner: LogRequests, request: LogsRequested) -> None:
        self._owner = owner
        self._request = request
        self.seq = 0

    async def send(self, pod: str | None, text: str) -> None:
        if pod is not None and not text:
            return
        for start in range(0, max(len(text), 1), CHUNK_CHARS):
            await self._publish(pod, text[start : start + CHUNK_CHARS], final=False)

    async def finish(self, error: str | None = None) -> None:
        await self._publish(None, "", final=True, error=error)

    async def _publish(
        self, pod: str | None, text: str, *, final: bool, error: str | None = None
    ) -> None:
        owner, request = self._owner, self._request
        chunk = LogsChunk(
            request_id=request.request_id,
            uid=request.uid,
            cluster=owner._cluster,
            seq=self.seq,
            pod=pod,
            text=text,
            final=final,
            error=error,
        )
        self.seq += 1
        event = make_event(EventType.LOGS_CHUNK, owner._source, request.uid, chunk)
        await publish_event(owner._bus, owner._topics.logs, request.request_id, event)
