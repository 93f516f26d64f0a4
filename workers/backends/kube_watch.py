"""Following our pods: list + watch with resourceVersion and bookmarks, relisting on 410 Gone,
and turning each pod's phase changes, and each restart the kubelet makes in place, into one
`PodObservation` apiece."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bus.retry import retry_transient
from workers.backends.base import PodObservation, PodPhase
from workers.backends.kube_capacity import job_uid_of
from workers.backends.kube_client import (
    CONNECTION_ERRORS,
    KubeApi,
    KubeError,
    KubeForbidden,
    KubeGone,
    classify,
)
from workers.frameworks import ADAPTERS
from workers.rendering import DEFAULT_CONTAINER_ANNOTATION

log = logging.getLogger(__name__)

KNOWN_MAIN_CONTAINERS = tuple(adapter.default_container for adapter in ADAPTERS.values())
"""The default container of every kind (the adapters table), for pods that do not name
theirs."""
_PHASES: tuple[PodPhase, ...] = ("Pending", "Running", "Succeeded", "Failed")
_UNSCHEDULABLE = "Unschedulable"
# Waiting reasons of a container that is not backing off after an exit: the kubelet is
# creating it (a new container, whose restartCount already counts the exit) or its pod is
# still initialising.
_NOT_BACKING_OFF = ("", "ContainerCreating", "PodInitializing")
# What ends one watch stream without ending the watching: outages, bad lines, server errors.
_INTERRUPTIONS: tuple[type[BaseException], ...] = (KubeError, ValueError, *CONNECTION_ERRORS)


def _goes_on_after(error: BaseException) -> bool:
    """Whether the watching goes on after this error (a refusal for good ends it)."""
    return isinstance(error, _INTERRUPTIONS) and not isinstance(error, KubeForbidden)


PodHandler = Callable[[str, Mapping[str, Any]], Awaitable[None]]
"""Called with the event type (ADDED, MODIFIED, DELETED, or LISTED during a (re)list)."""
ResyncHandler = Callable[[str | None, set[str]], None]
"""Called after a (re)list of a scope with the uids of every pod the list returned."""


def _terminated_exit_code(status: Mapping[str, Any], place: str = "state") -> int | None:
    terminated = (status.get(place) or {}).get("terminated") or {}
    code = terminated.get("exitCode")
    return None if code is None else int(code)


def _main_container(pod: Mapping[str, Any]) -> str | None:
    """The annotated default container, else a known framework container."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    preferred = annotations.get(DEFAULT_CONTAINER_ANNOTATION)
    if preferred in names:
        return str(preferred)
    return next((n for n in KNOWN_MAIN_CONTAINERS if n in names), None)


def main_exit_code(pod: Mapping[str, Any]) -> int | None:
    """The main container's exit code (see `_main_container`), else the first container's
    that terminated with one."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    main = _main_container(pod)
    for status in sorted(statuses, key=lambda status: status.get("name") != main):
        code = _terminated_exit_code(status)
        if code is not None:
            return code
    return None


@dataclass(frozen=True)
class RestartState:
    """What the kubelet's in-place restarts of a pod's containers look like in its status."""

    restarts: int = 0
    """restartCount over every container and init container, plus the exits whose new
    container does not exist yet (the kubelet counts a restart when it creates that)."""
    restarting: bool = False
    """Some container exited and its new one does not run yet."""
    exit_code: int | None = None
    """The latest such exit's code, the main container's first."""


def _kubelet_restarts(policy: str, exit_code: int | None, *, init: bool, sidecar: bool) -> bool:
    """Whether the kubelet starts a container again after this exit (pkg/kubelet:
    ShouldContainerBeRestarted): sidecars always; otherwise never under Never, every exit of
    a regular container under Always, and only failures under OnFailure and of init
    containers (which are done once they succeed)."""
    if sidecar:
        return True
    if policy == "Never":
        return False
    if policy == "Always" and not init:
        return True
    return exit_code not in (0, None)


def _pending_exit(status: Mapping[str, Any]) -> tuple[bool, int | None]:
    """(exited, code) of a container whose new one does not exist yet: terminated, or
    backing off with the exit as its last state."""
    state = status.get("state") or {}
    if state.get("terminated") is not None:
        return True, _terminated_exit_code(status)
    waiting = state.get("waiting")
    last = (status.get("lastState") or {}).get("terminated")
    if waiting is not None and last is not None and waiting.get("reason") not in _NOT_BACKING_OFF:
        return True, _terminated_exit_code(status, "lastState")
    return False, None


def restart_state(pod: Mapping[str, Any]) -> RestartState:
    """The pod's in-place restarts. Only a Pending or Running pod has restarts to come; a
    pod that ended restarts nothing, and only its restartCounts count."""
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    policy = str(spec.get("restartPolicy") or "Always")
    live = status.get("phase") in ("Pending", "Running")
    main = _main_container(pod)
    sidecars = {
        c.get("name")
        for c in spec.get("initContainers") or []
        if c.get("restartPolicy") == "Always"
    }
    restarts, restarting = 0, False
    # (not pending, not the main container, code) of each exit seen: pending exits first,
    # the main container's first among equals.
    exits: list[tuple[bool, bool, int]] = []
    for field_name, init in (("containerStatuses", False), ("initContainerStatuses", True)):
        for container in status.get(field_name) or []:
            restarts += int(container.get("restartCount") or 0)
            exited, code = _pending_exit(container) if live else (False, None)
            sidecar = init and container.get("name") in sidecars
            if exited and _kubelet_restarts(policy, code, init=init, sidecar=sidecar):
                restarts += 1
                restarting = True
                if code is not None:
                    exits.append((False, container.get("name") != main, code))
                continue
            previous = _terminated_exit_code(container, "lastState")
            if previous is not None:
                exits.append((True, container.get("name") != main, previous))
    exit_code = min(exits)[2] if exits and restarts else None
    return RestartState(restarts, restarting, exit_code)


def _unschedulable_message(pod: Mapping[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == _UNSCHEDULABLE
        ):
            return f"{_UNSCHEDULABLE}: {condition.get('message') or 'no node fits the pod'}"
    return None


def _failure_message(pod: Mapping[str, Any]) -> str | None:
    status = pod.get("status") or {}
    if status.get("message"):
        reason = status.get("reason")
        return f"{reason}: {status['message']}" if reason else str(status["message"])
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated.get("message"):
            return str(terminated["message"])
    return None


@dataclass
class PodObserver:
    """Pod objects in, observations out: one per (pod uid, phase); a Pending pod that the
    scheduler found no node for gets one more, whose message starts with `Unschedulable:`."""

    emitted: dict[str, set[str]] = field(default_factory=dict)
    """pod uid -> the phases (and `Unschedulable`) already reported"""
    restarts: dict[str, tuple[int, bool]] = field(default_factory=dict)
    """pod uid -> the (restarts, restarting) last reported, for restarts made in place"""
    namespaces: dict[str, str] = field(default_factory=dict)
    """pod uid -> namespace, so that a namespace's relist prunes only its own pods"""

    def observe(self, pod: Mapping[str, Any]) -> PodObservation | None:
        metadata = pod.get("metadata") or {}
        job_uid = job_uid_of(pod)
        phase = (pod.get("status") or {}).get("phase")
        uid = str(metadata.get("uid") or "")
        if job_uid is None or phase not in _PHASES or not uid:
            return None
        message: str | None = None
        exit_code: int | None = None
        key = str(phase)
        restarts = restart_state(pod)
        if phase == "Pending":
            message = _unschedulable_message(pod)
            if message is not None:
                key = _UNSCHEDULABLE
        if phase in ("Succeeded", "Failed"):
            exit_code = main_exit_code(pod)
            if phase == "Failed":
                message = _failure_message(pod)
        else:
            exit_code = restarts.exit_code
        self.namespaces[uid] = str(metadata.get("namespace") or "")
        seen = self.emitted.setdefault(uid, set())
        reported = self.restarts.get(uid, (0, False))
        if key in seen and reported == (restarts.restarts, restarts.restarting):
            return None
        seen.add(key)
        self.restarts[uid] = (restarts.restarts, restarts.restarting)
        return PodObservation(
            job_uid=job_uid,
            name=str(metadata.get("name")),
            phase=phase,
            exit_code=exit_code,
            message=message,
            node=(pod.get("spec") or {}).get("nodeName") or None,
            restarts=restarts.restarts,
            restarting=restarts.restarting,
            uid=uid,
        )

    def forget(self, uid: str) -> None:
        self.emitted.pop(uid, None)
        self.restarts.pop(uid, None)
        self.namespaces.pop(uid, None)

    def retain(self, uids: set[str], namespace: str | None = None) -> None:
        """Forget pods a fresh list of `namespace` (None: all) no longer has."""
        for uid in [u for u in self.emitted if u not in uids]:
            if namespace is None or self.namespaces.get(uid) == namespace:
                self.forget(uid)


class PodWatch:
    """List, then watch from the list's resourceVersion, for one scope (a namespace or all).

    Bookmarks keep the resourceVersion fresh; a closed stream resumes from it; a 410 Gone means
    the history is compacted, so the scope is listed again (and nothing is missed).
    Subclasses follow another resource by overriding `resource` and `_list_method`.
    """

    resource = "pods"

    def __init__(
        self,
        api: KubeApi,
        namespace: str | None,
        selector: str,
        on_pod: PodHandler,
        on_resync: ResyncHandler,
        *,
        timeout_seconds: int = 300,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.selector = selector
        self.on_pod = on_pod
        self.on_resync = on_resync
        self.timeout_seconds = timeout_seconds
        self.resource_version: str | None = None
        self.lists = 0
        self.relists = 0
        self.watches = 0

    @property
    def _extra(self) -> dict[str, Any]:
        return {"cluster": self.api.cluster}

    def _selected(self) -> dict[str, str]:
        return {"label_selector": self.selector} if self.selector else {}

    def _list_method(self) -> tuple[Any, tuple[Any, ...]]:
        core = self.api.core
        if self.namespace is None:
            return core.list_pod_for_all_namespaces, ()
        return core.list_namespaced_pod, (self.namespace,)

    async def list(self) -> None:
        """List the scope, hand every pod over, and remember the list's resourceVersion."""
        method, args = self._list_method()
        reply = await self.api.call(
            "list", self.resource, self.namespace, method, *args, **self._selected()
        )
        self.lists += 1
        uids = set()
        for pod in reply.get("items") or []:
            uids.add(str((pod.get("metadata") or {}).get("uid")))
            await self.on_pod("LISTED", pod)
        self.on_resync(self.namespace, uids)
        self.resource_version = str((reply.get("metadata") or {}).get("resourceVersion") or "")

    async def run(self) -> None:
        """Watch until cancelled; `list()` must have run (start() does it, so that errors
        such as a 403 surface there rather than in a background task). An interrupted watch
        is started again with the API's backoff, which begins again after a watch that ended
        as the server meant it to."""
        while True:
            await retry_transient(
                self._watch_round,
                self.api.retry.unlimited(),
                transient=_goes_on_after,
                on_retry=self._interrupted,
            )

    async def _watch_round(self) -> None:
        """A (re)list when there is no resourceVersion to go on, then one watch stream."""
        try:
            if not self.resource_version:
                await self.list()
            await self._watch_once()
        except KubeGone as gone:
            self.relists += 1
            self.resource_version = None
            log.info("watch expired (%s); listing again", gone, extra=self._extra)

    def _interrupted(self, error: BaseException, failures: int, wait: float) -> None:
        if isinstance(error, CONNECTION_ERRORS):
            self.api.note_outage()  # a broken stream: the apiserver may be restarting
        log.warning("%s watch interrupted: %s", self.resource, error, extra=self._extra)

    async def _watch_once(self) -> None:
        method, args = self._list_method()
        # The server ends the stream after timeout_seconds; the client waits a little longer.
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=10, sock_read=self.timeout_seconds + 30
        )
        response = await self.api.open(
            "watch",
            self.resource,
            self.namespace,
            method,
            *args,
            **self._selected(),
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=self.timeout_seconds,
            _request_timeout=timeout,
        )
        self.watches += 1
        try:
            async for line in response.content:
                if line.strip():
                    await self._handle(line)
        finally:
            response.release()

    async def _handle(self, line: bytes) -> None:
        event = json.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            raise classify(
                code,
                json.dumps(obj).encode(),
                who=self.api.identity,
                verb="watch",
                resource=self.resource,
                namespace=self.namespace,
            )
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind != "BOOKMARK":
            await self.on_pod(str(kind), obj)
        if version:
            self.resource_version = str(version)
