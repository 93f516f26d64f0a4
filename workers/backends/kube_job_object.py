"""The job's own Kubeflow object on a member cluster in direct mode: where the cluster serves
the kind's kubeflow.org CRD, the worker creates the job's CR (`runPolicy.managedBy:
trainhub.io/dispatcher`, so a Training Operator there leaves it alone), owns the job's objects
by it, and writes the run's status into its status subresource (and a suspension into its
`runPolicy.suspend`) as the operator would. The objects are watched, so that one deleted by
someone else (`kubectl delete pytorchjob`) is told to the worker as a `JobObjectLost`, and a
`runPolicy.suspend` someone else set there (`kubectl patch`) as a `JobObjectSuspension`.

The watches select nothing by label: an object is known as the job's by its uid once made or
found, so that a label someone edits or removes there is not taken for a deletion (a watch
with a label selector reports an object that stops matching as DELETED)."""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from schemas.kubeflow import AnyJob
from schemas.run_policy import TRAINHUB_MANAGER
from schemas.status import ConditionType, JobStatus
from workers.backends.base import (
    JobObjectLost,
    JobObjectNews,
    JobObjectSuspension,
)
from workers.backends.delegated_kinds import DELEGATED_PLURALS, KUBEFLOW_GROUP, KUBEFLOW_VERSION
from workers.backends.kube_capacity import job_uid_of
from workers.backends.kube_client import (
    KubeApi,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeNotFound,
)
from workers.backends.kube_watch import PodWatch
from workers.rendering import LABEL_ATTEMPT, LABEL_JOB_UID, LABEL_MANAGED, OPERATOR_NAME

log = logging.getLogger(__name__)

API_VERSION = f"{KUBEFLOW_GROUP}/{KUBEFLOW_VERSION}"
_MERGE_PATCH = "application/merge-patch+json"


def job_object(job: AnyJob, attempt: int, managed_by: str | None) -> dict[str, Any]:
    """The job's Kubeflow object: its kind and spec, `runPolicy.managedBy` set to
    `managed_by` (None: unset), and trainhub's labels on it and on every pod template."""
    document = job.to_document()
    spec: dict[str, Any] = copy.deepcopy(document["spec"])
    run_policy = dict(spec.get("runPolicy") or {})
    run_policy.pop("managedBy", None)
    if managed_by is not None:
        run_policy["managedBy"] = managed_by
    spec["runPolicy"] = run_policy
    labels = {
        LABEL_MANAGED: OPERATOR_NAME,
        LABEL_JOB_UID: job.uid,
        LABEL_ATTEMPT: str(attempt),
    }
    for replica in spec[job.REPLICA_FIELD].values():
        template = replica.setdefault("template", {})
        metadata = template.setdefault("metadata", {})
        metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    metadata = {
        "name": job.metadata.name,
        "namespace": job.metadata.namespace,
        "labels": {**(job.metadata.labels or {}), **labels},
    }
    if job.metadata.annotations:
        metadata["annotations"] = dict(job.metadata.annotations)
    return {"apiVersion": API_VERSION, "kind": job.kind, "metadata": metadata, "spec": spec}


def _time(moment: datetime | None) -> str | None:
    """metav1.Time as the apiserver writes it: RFC 3339, seconds, UTC."""
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(status: JobStatus) -> dict[str, Any]:
    """The run's status in the Training Operator's shape (kubeflow.org/v1 JobStatus)."""
    conditions = []
    for condition in status.conditions:
        entry: dict[str, Any] = {"type": condition.type, "status": condition.status}
        for key in ("reason", "message"):
            value = getattr(condition, key)
            if value is not None:
                entry[key] = value
        for key in ("lastUpdateTime", "lastTransitionTime"):
            value = _time(getattr(condition, key))
            if value is not None:
                entry[key] = value
        conditions.append(entry)
    replicas = {
        rtype: {
            "active": counts.active,
            "succeeded": counts.succeeded,
            "failed": counts.failed,
            **({"selector": counts.selector} if counts.selector else {}),
        }
        for rtype, counts in status.replicaStatuses.items()
    }
    body: dict[str, Any] = {"conditions": conditions, "replicaStatuses": replicas}
    # Merge-patch nulls remove a time a resumed run no longer has.
    body["startTime"] = _time(status.startTime)
    body["completionTime"] = _time(status.completionTime)
    return body


@dataclass(frozen=True)
class JobObjectRef:
    """Where one job's CR lives, and the ownerReference that points at it."""

    kind: str
    namespace: str
    name: str
    uid: str

    @property
    def plural(self) -> str:
        return DELEGATED_PLURALS[self.kind]

    def owner_reference(self) -> dict[str, Any]:
        # As upstream's controller sets it on the pods, Services and PodGroups it makes.
        return {
            "apiVersion": API_VERSION,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def owned_by_job_object(obj: Mapping[str, Any]) -> JobObjectRef | None:
    """The Kubeflow job an object's controller ownerReference names, if any."""
    metadata = obj.get("metadata") or {}
    for owner in metadata.get("ownerReferences") or []:
        if (
            owner.get("controller")
            and owner.get("apiVersion") == API_VERSION
            and owner.get("kind") in DELEGATED_PLURALS
        ):
            return JobObjectRef(
                str(owner["kind"]),
                str(metadata.get("namespace")),
                str(owner.get("name")),
                str(owner.get("uid")),
            )
    return None


class JobObjectWatch(PodWatch):
    """Our objects of one Kubeflow kind in one scope, followed as pods are."""

    def __init__(
        self, api: KubeApi, plural: str, namespace: str | None, *args: Any, **kw: Any
    ) -> None:
        super().__init__(api, namespace, *args, **kw)
        self.resource = plural

    def _list_method(self) -> tuple[Any, tuple[Any, ...]]:
        custom = self.api.custom
        if self.namespace is None:
            return custom.list_cluster_custom_object, (
                KUBEFLOW_GROUP,
                KUBEFLOW_VERSION,
                self.resource,
            )
        return custom.list_namespaced_custom_object, (
            KUBEFLOW_GROUP,
            KUBEFLOW_VERSION,
            self.namespace,
            self.resource,
        )


class JobObjects:
    """The CRs of one member cluster's direct-mode jobs: found served per kind at start (API
    discovery), created idempotently, their status patched, deleted with the job."""

    def __init__(
        self,
        api: KubeApi,
        cluster: str,
        news: asyncio.Queue[JobObjectNews] | None = None,
    ) -> None:
        """`news`: where a job's object deleted, suspended or resumed by someone else is
        told."""
        self.api = api
        self.cluster = cluster
        self.news: asyncio.Queue[JobObjectNews] = asyncio.Queue() if news is None else news
        self.served: set[str] = set()
        """Kinds whose kubeflow.org/v1 resource the cluster serves."""
        self._refs: dict[str, JobObjectRef] = {}
        """job uid -> its CR, once created or found."""
        self._jobs: dict[str, str] = {}
        """object uid -> job uid, for the objects in `_refs` (how watch events are matched
        to their jobs, whatever labels the objects carry by then)."""
        self._generations: dict[str, int] = {}
        """job uid -> the newest `metadata.generation` of its object seen or written: an
        event of an older spec is no news about it."""
        self._attempts: dict[str, int] = {}
        """job uid -> the attempt its CR was created or found for: another attempt reads it
        again (it may have been deleted and made anew meanwhile)."""
        self._written: dict[str, dict[str, Any]] = {}
        """job uid -> the status body last written (unchanged ones are not sent again)."""
        self._suspended: dict[str, bool] = {}
        """job uid -> the object's `spec.runPolicy.suspend` as created, last patched, or
        last seen set by someone else."""
        self._seen: dict[str, tuple[str, str, str]] = {}
        """object uid -> (job uid, plural, namespace) of every one of our objects the watches
        have seen: a relist that lacks one saw it go."""
        self._lost: dict[str, int] = {}
        """job uid -> the attempt whose object someone else deleted: not made again for it."""
        self._owners: dict[str, tuple[int, str]] = {}
        """job uid -> (attempt, object uid) that the job's objects in the cluster name as
        their owner, from the latest listing of them (adoption, sweeps): a restarted worker
        knows so which object its adopted runs had."""

    def _extra(self, job_uid: str | None = None) -> dict[str, Any]:
        return {"cluster": self.cluster, "job": job_uid}

    async def discover(self) -> None:
        """Which kinds the cluster serves: the group's resources (none when it is absent)."""
        try:
            reply = await self.api.call(
                "get",
                f"apis/{API_VERSION}",
                None,
                self.api.custom.get_api_resources,
                KUBEFLOW_GROUP,
                KUBEFLOW_VERSION,
            )
        except KubeNotFound:
            self.served = set()
            return
        names = {str(r.get("name")) for r in reply.get("resources") or []}
        self.served = {kind for kind, plural in DELEGATED_PLURALS.items() if plural in names}
        if self.served:
            log.info(
                "each job of %s gets its kubeflow.org object here",
                ", ".join(sorted(self.served)),
                extra=self._extra(),
            )

    def watches(
        self, namespaces: Sequence[str] | None, timeout_seconds: int
    ) -> list[JobObjectWatch]:
        """A watch of our objects for each served kind in each scope (every namespace when
        `namespaces` is None); `list()` them before running them."""
        scopes: list[str | None] = list(namespaces) if namespaces is not None else [None]
        return [
            JobObjectWatch(
                self.api,
                DELEGATED_PLURALS[kind],
                scope,
                "",  # every object of the kind: see the module's docstring
                functools.partial(self._on_object, DELEGATED_PLURALS[kind]),
                functools.partial(self._on_listed, DELEGATED_PLURALS[kind]),
                timeout_seconds=timeout_seconds,
            )
            for kind in sorted(self.served)
            for scope in scopes
        ]

    async def listed_watches(
        self, namespaces: Sequence[str] | None, timeout_seconds: int
    ) -> list[JobObjectWatch]:
        """`watches`, each listed once; none when the identity may not list them (an older
        `member-rbac`): the jobs run as before, only a deletion of their object goes
        unnoticed."""
        watches = self.watches(namespaces, timeout_seconds)
        try:
            for watch in watches:
                await watch.list()
        except KubeForbidden as error:
            log.warning(
                "the jobs' own objects are not watched (re-apply `trainhub member-rbac`): %s",
                error,
                extra=self._extra(),
            )
            return []
        return watches

    async def _on_object(self, plural: str, event: str, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        held = self._jobs.get(uid)
        labels = metadata.get("labels") or {}
        ours = labels.get(LABEL_MANAGED) == OPERATOR_NAME
        job_uid = held if held is not None else (job_uid_of(obj) if ours else None)
        if job_uid is None or not uid:
            return  # someone else's object (the watch sees every one of the kind)
        if event == "DELETED":
            self._seen.pop(uid, None)
            self._gone(job_uid, uid)
            return
        self._seen[uid] = (job_uid, plural, str(metadata.get("namespace")))
        if held is not None:
            self._follow_object(job_uid, obj)

    def _follow_object(self, job_uid: str, obj: Mapping[str, Any]) -> None:
        """A newer spec of the job's object: a `runPolicy.suspend` that is not what the
        worker wrote or last saw is someone else's, told as a `JobObjectSuspension`."""
        metadata = obj.get("metadata") or {}
        generation = int(metadata.get("generation") or 0)
        if generation <= self._generations.get(job_uid, 0):
            return  # as seen or written already, or older (a stale event)
        self._generations[job_uid] = generation
        run_policy = (obj.get("spec") or {}).get("runPolicy") or {}
        suspend = bool(run_policy.get("suspend"))
        before = self._suspended.get(job_uid)
        self._suspended[job_uid] = suspend
        if before is None or before == suspend:
            return  # (None: nothing known to compare with; now it is)
        ref = self._refs[job_uid]
        log.info(
            "%s %s/%s was %s by someone else",
            ref.plural,
            ref.namespace,
            ref.name,
            "suspended" if suspend else "resumed",
            extra=self._extra(job_uid),
        )
        what = f"{ref.kind} {ref.name}"
        self.news.put_nowait(
            JobObjectSuspension(job_uid, self._attempts.get(job_uid), suspend, what)
        )

    def _hold(self, job_uid: str, ref: JobObjectRef, attempt: int) -> None:
        self._drop(job_uid)
        self._refs[job_uid] = ref
        self._jobs[ref.uid] = job_uid
        self._attempts[job_uid] = attempt

    def _drop(self, job_uid: str) -> tuple[JobObjectRef | None, int | None]:
        """Forget the job's object (and what was written into it); returns it and the
        attempt it was held for."""
        ref = self._refs.pop(job_uid, None)
        if ref is not None:
            self._jobs.pop(ref.uid, None)
        self._written.pop(job_uid, None)
        self._suspended.pop(job_uid, None)
        self._generations.pop(job_uid, None)
        return ref, self._attempts.pop(job_uid, None)

    def _on_listed(self, plural: str, namespace: str | None, uids: set[str]) -> None:
        """A (re)list of one kind in one scope: objects seen before and missing now went."""
        for uid, (job_uid, kind, where) in list(self._seen.items()):
            if kind == plural and namespace in (None, where) and uid not in uids:
                del self._seen[uid]
                self._gone(job_uid, uid)

    def _gone(self, job_uid: str, uid: str) -> None:
        """Object `uid` went. Only the one this worker holds for the job is news (its own
        deletions forget the job's object before they are made; an older attempt's is
        another object)."""
        ref = self._refs.get(job_uid)
        if ref is None or ref.uid != uid:
            return
        _, attempt = self._drop(job_uid)
        if attempt is not None:
            self._lost[job_uid] = attempt
        log.warning(
            "%s %s/%s was deleted by someone else",
            ref.plural,
            ref.namespace,
            ref.name,
            extra=self._extra(job_uid),
        )
        self.news.put_nowait(JobObjectLost(job_uid, attempt, f"{ref.kind} {ref.name}"))

    def note_owners(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """The owners the job's listed objects name (see `_owners`), replacing the last
        listing's."""
        self._owners = {}
        for obj in objects:
            ref, job_uid = owned_by_job_object(obj), job_uid_of(obj)
            labels = (obj.get("metadata") or {}).get("labels") or {}
            attempt = str(labels.get(LABEL_ATTEMPT) or "")
            if ref is not None and job_uid is not None and attempt.isdigit():
                self._owners[job_uid] = (int(attempt), ref.uid)

    async def _deleted_while_away(self, job: AnyJob, attempt: int) -> bool:
        """The object that this attempt's objects in the cluster name as their owner is gone
        (deleted while no worker watched): told as a loss, and not made again."""
        owner = self._owners.get(job.uid)
        if owner is None or owner[0] != attempt:
            return False
        plural = DELEGATED_PLURALS[job.kind]
        namespace, name = job.metadata.namespace, job.metadata.name
        try:
            found = await self.api.call(
                "get",
                plural,
                namespace,
                self.api.custom.get_namespaced_custom_object,
                KUBEFLOW_GROUP,
                KUBEFLOW_VERSION,
                namespace,
                plural,
                name,
            )
        except KubeNotFound:
            found = {}
        self._owners.pop(job.uid, None)  # (kept for a retry when the read did not answer)
        if str((found.get("metadata") or {}).get("uid") or "") == owner[1]:
            return False
        self._lost[job.uid] = attempt
        log.warning(
            "%s %s/%s was deleted while no worker watched",
            plural,
            namespace,
            name,
            extra=self._extra(job.uid),
        )
        self.news.put_nowait(JobObjectLost(job.uid, attempt, f"{job.kind} {name}"))
        return True

    def wanted(self, job: AnyJob) -> bool:
        return job.kind in self.served and job.API_VERSION == API_VERSION

    def ref(self, job_uid: str) -> JobObjectRef | None:
        return self._refs.get(job_uid)

    async def ensure(self, job: AnyJob, attempt: int) -> JobObjectRef | None:
        """The job's CR, created or found (this job's, by its uid label); None for a kind
        the cluster does not serve. One of that name that is not this job's is refused."""
        if not self.wanted(job) or self._lost.get(job.uid) == attempt:
            return None  # (someone else deleted this attempt's: the job fails, not made again)
        known = self._refs.get(job.uid)
        if known is not None and self._attempts.get(job.uid) == attempt:
            return known
        if await self._deleted_while_away(job, attempt):
            return None
        self._lost.pop(job.uid, None)
        plural = DELEGATED_PLURALS[job.kind]
        namespace, name = job.metadata.namespace, job.metadata.name
        custom = self.api.custom
        try:
            found = await self.api.call(
                "create",
                plural,
                namespace,
                custom.create_namespaced_custom_object,
                KUBEFLOW_GROUP,
                KUBEFLOW_VERSION,
                namespace,
                plural,
                job_object(job, attempt, TRAINHUB_MANAGER),
            )
        except KubeConflict:
            found = await self.api.call(
                "get",
                plural,
                namespace,
                custom.get_namespaced_custom_object,
                KUBEFLOW_GROUP,
                KUBEFLOW_VERSION,
                namespace,
                plural,
                name,
            )
            owner = job_uid_of(found)
            if owner != job.uid:
                whose = f"job uid {owner}" if owner else "not trainhub's"
                raise KubeConflict(
                    f"{plural} {namespace}/{name} exists and is not this job's ({whose}): "
                    "trainhub does not adopt it; delete it or rename the job",
                    409,
                    "AlreadyExists",
                ) from None
        metadata = found.get("metadata") or {}
        run_policy = (found.get("spec") or {}).get("runPolicy") or {}
        ref = JobObjectRef(job.kind, namespace, name, str(metadata.get("uid") or ""))
        self._hold(job.uid, ref, attempt)
        self._suspended[job.uid] = bool(run_policy.get("suspend"))
        self._generations[job.uid] = int(metadata.get("generation") or 0)
        return ref

    async def write_status(self, job: AnyJob, status: JobStatus) -> None:
        """Merge-patch the CR's status subresource with the run's, when it changed. Not
        written is only logged: the run goes on, and its next change writes it whole."""
        if not self.wanted(job) or job.uid not in self._refs:
            return  # none made or found for this job (or one that is not its own)
        await self._follow_suspension(job, status.is_true(ConditionType.SUSPENDED))
        body = status_body(status)
        if self._written.get(job.uid) == body:
            return
        plural = DELEGATED_PLURALS[job.kind]
        namespace, name = job.metadata.namespace, job.metadata.name
        try:
            await self.api.send(
                "patch",
                f"{plural}/status",
                namespace,
                self.api.custom.patch_namespaced_custom_object_status,
                KUBEFLOW_GROUP,
                KUBEFLOW_VERSION,
                namespace,
                plural,
                name,
                {"status": body},
                _content_type=_MERGE_PATCH,
            )
        except KubeError as error:
            log.warning(
                "status of %s %s/%s not written: %s",
                plural,
                namespace,
                name,
                error,
                extra=self._extra(job.uid),
            )
            return
        self._written[job.uid] = body

    async def _follow_suspension(self, job: AnyJob, suspended: bool) -> None:
        """The object's `spec.runPolicy.suspend` says what the run is (suspended or resumed
        through the hub), as a suspension through the object would have said it. Noted as
        written before it is sent: the watch may bring the change before the answer."""
        before = self._suspended.get(job.uid)
        if before == suspended:
            return
        plural = DELEGATED_PLURALS[job.kind]
        namespace, name = job.metadata.namespace, job.metadata.name
        self._suspended[job.uid] = suspended
        try:
            reply = await self.api.call(
                "patch",
                plural,
                namespace,
                self.api.custom.patch_namespaced_custom_object,
                KUBEFLOW_GROUP,
                KUBEFLOW_VERSION,
                namespace,
                plural,
                name,
                {"spec": {"runPolicy": {"suspend": suspended}}},
                _content_type=_MERGE_PATCH,
            )
        except KubeError as error:
            if job.uid in self._refs:  # (not lost meanwhile)
                if before is None:
                    self._suspended.pop(job.uid, None)
                else:
                    self._suspended[job.uid] = before
            log.warning(
                "%s %s/%s not marked suspend=%s: %s",
                plural,
                namespace,
                name,
                suspended,
                error,
                extra=self._extra(job.uid),
            )
            return
        generation = int((reply.get("metadata") or {}).get("generation") or 0)
        if job.uid in self._refs and generation > self._generations.get(job.uid, 0):
            self._generations[job.uid] = generation

    async def delete(self, job_uid: str, found: list[JobObjectRef]) -> None:
        """Delete the job's CR: the one known, and those its objects' ownerReferences name
        (a restarted worker knows them only so)."""
        refs = {(r.kind, r.namespace, r.name): r for r in found}
        known, _ = self._drop(job_uid)
        if known is not None:
            refs[(known.kind, known.namespace, known.name)] = known
        for ref in refs.values():
            try:
                await self.api.call(
                    "delete",
                    ref.plural,
                    ref.namespace,
                    self.api.custom.delete_namespaced_custom_object,
                    KUBEFLOW_GROUP,
                    KUBEFLOW_VERSION,
                    ref.namespace,
                    ref.plural,
                    ref.name,
                    propagation_policy="Background",
                )
            except KubeNotFound:
                continue
            log.info(
                "deleted %s %s/%s", ref.plural, ref.namespace, ref.name, extra=self._extra(job_uid)
            )

    def forget(self, job_uid: str) -> None:
        """The run left the worker: its status is written no more. Where its CR is stays
        known, for a revocation that comes later (its pods may all be gone by then)."""
        self._written.pop(job_uid, None)
        self._lost.pop(job_uid, None)
