"""Answers `pods.requested` events: the phase of each of a job's pods, from the worker's run
of the job while it holds one, else from the cluster, as one `pods.listed` event on the logs
topic keyed by the request id."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from bus.base import Bus
from bus.events import publish_event
from bus.topics import Topics
from schemas.events import (
    EventType,
    ListedPod,
    ListedPodPhase,
    PodsListed,
    PodsRequested,
    make_event,
)
from schemas.status import JobPhase
from workers.backends.base import UNSCHEDULABLE_PREFIX, Backend
from workers.backends.delegating import DelegatingBackend
from workers.job_run import JobRun, PodState
from workers.request_answering import RequestAnswering

log = logging.getLogger(__name__)


class PodRequests(RequestAnswering[PodsRequested]):
    """A listing that fails is answered with the error rather than taking the worker down."""

    kind = "pod"

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
        super().__init__(bus, topics, backend, runs, cluster=cluster, source=source)
        # A delegated run's pods are its operator's: the run follows only their scheduling.
        self._runs_follow_pods = not isinstance(backend, DelegatingBackend)

    async def _answer(self, request: PodsRequested) -> None:
        try:
            pods, error = await self._pods(request.uid)
        except Exception as exc:  # the requester must hear why, whatever broke
            log.warning("pod request failed: %s", exc, extra=self._extra(request))
            pods, error = [], f"listing the pods on {self._cluster} failed: {exc}"
        answer = PodsListed(
            request_id=request.request_id,
            uid=request.uid,
            cluster=self._cluster,
            pods=pods,
            error=error,
        )
        event = make_event(EventType.PODS_LISTED, self._source, request.uid, answer)
        try:
            await publish_event(self._bus, self._topics.logs, request.request_id, event)
        except Exception as exc:  # the requester gives up on its own; the worker goes on
            log.error("cannot answer the pod request: %s", exc, extra=self._extra(request))

    async def _pods(self, uid: str) -> tuple[list[ListedPod], str | None]:
        run = self._runs.get(uid)
        if run is not None and self._runs_follow_pods:
            return run_pods(run), None
        # A job that finished a while ago has no run here any more: its pods, where the
        # cluster still keeps them, are found by its label (as are a delegated job's).
        listed = await self._backend.job_pods(uid)
        if not listed and run is None:
            return [], f"job {uid} has no pods on cluster {self._cluster}"
        return listed, None


def run_pods(run: JobRun) -> list[ListedPod]:
    """The run's pods as it knows them, in name order."""
    return [_listed(run, run.pods[name]) for name in sorted(run.pods)]


def _listed(run: JobRun, pod: PodState) -> ListedPod:
    phase, reason, message = _phase(run, pod)
    return ListedPod(
        name=pod.plan.name,
        namespace=pod.plan.namespace,
        phase=phase,
        node_name=pod.node,
        start_time=pod.started,
        reason=reason,
        message=message,
    )


def _phase(run: JobRun, pod: PodState) -> tuple[ListedPodPhase, str | None, str | None]:
    """The pod's phase, and why, as far as the run can tell."""
    if run.suspended:
        return "Pending", "Suspended", "deleted while the job is suspended, made again on resume"
    if pod.held:
        if run.finished:
            return "Unknown", "NotCreated", "the job ended before the pod was made"
        return "Pending", "WaitingForDependencies", "made once the replicas it depends on are"
    if run.finished and pod.phase in ("Pending", "Running"):
        if run.phase == JobPhase.SUCCEEDED:
            # As the job's replica counts have it (upstream's): a succeeded job's pods that
            # were still active are stopped or left to finish, and count as succeeded.
            return "Succeeded", None, None
        # Deleted with the job, or left running under cleanPodPolicy None: no longer
        # followed either way.
        return "Unknown", "JobFinished", f"the job ended while the pod was {pod.phase}"
    if pod.phase == "Pending" and pod.unschedulable:
        message = pod.unschedulable.removeprefix(UNSCHEDULABLE_PREFIX).strip()
        return "Pending", "Unschedulable", message
    if pod.phase == "Failed" and pod.exit_code is not None:
        return "Failed", "Error", f"its container exited with code {pod.exit_code}"
    return pod.phase, None, None
