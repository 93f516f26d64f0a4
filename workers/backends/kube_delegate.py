"""`kube` in delegate mode: each job becomes its own Kubeflow object (kubeflow.org/v1, the
job's kind and spec) on the member cluster, which the member's Training Operator runs; the
objects are watched (list + watch, 410 relist) and their status handed to the worker.

The job's pods are the operator's, made from the templates this backend labels with the
job's uid, so capacity (from nodes and every pod, as in direct mode) still knows them as the
job's, their watch tells the worker when the scheduler finds no node for them, and deleting
the job deletes them even where no garbage collector follows the object's deletion."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from typing import Any

from schemas.kubeflow import AnyJob
from workers.backends.delegated_kinds import (
    DELEGATED_PLURALS,
    KUBEFLOW_GROUP,
    KUBEFLOW_VERSION,
)
from workers.backends.delegating import DelegatedStatus, DelegatingBackend
from workers.backends.kube import MANAGED_SELECTOR, KubeBackend
from workers.backends.kube_capacity import job_uid_of
from workers.backends.kube_client import KubeConflict, KubeNotFound
from workers.backends.kube_job_object import JobObjectWatch, job_object
from workers.backends.kube_resources import custom_object_methods
from workers.backends.kube_watch import PodWatch
from workers.rendering import LABEL_ATTEMPT, LABEL_JOB_UID

log = logging.getLogger(__name__)

_MERGE_PATCH = "application/merge-patch+json"


def _attempt_of(obj: Mapping[str, Any]) -> int | None:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_ATTEMPT)
    return int(value) if isinstance(value, str) and value.isdigit() else None


class KubeDelegateBackend(KubeBackend, DelegatingBackend):
    """A member cluster whose Training Operator runs the jobs (`--mode delegate`)."""

    owns_by_job_object = False  # the object is the operator's to own the pods by

    def __init__(self, *args: Any, managed_by: str | None = None, **kw: Any) -> None:
        """`managed_by`: the objects' `runPolicy.managedBy` (None: unset, which the Training
        Operator takes as its own; `TRAINING_OPERATOR` says the same; `--delegate-managed-by`);
        other arguments as KubeBackend's (a gang scheduler is the operator's business, not
        given here)."""
        super().__init__(*args, **kw)
        self.job_statuses: asyncio.Queue[DelegatedStatus] = asyncio.Queue()
        self.managed_by = managed_by
        self.unserved: set[str] = set()
        """Kinds whose CRD the cluster does not serve (found at start)."""
        self._objects: dict[str, tuple[str, int | None, str, str]] = {}
        """object uid -> (job uid, attempt, plural, namespace) of every object seen."""

    async def _initial_watches(self) -> list[PodWatch]:
        """Our objects of every kind the cluster serves, in each allowed namespace (everywhere
        when all are); listed first, so that the objects of adopted jobs report their status
        at once. A kind whose CRD is missing is refused (`delegates`); none served at all
        fails the start. Then our pods, as in direct mode (the operator makes them from the
        templates this backend labels): the worker follows only what the scheduler says of
        them, and their logs are found by name."""
        scopes: list[str | None] = list(self.namespaces) if self.namespaces is not None else [None]
        watches: list[PodWatch] = []
        for kind, plural in DELEGATED_PLURALS.items():
            for scope in scopes:
                watch = JobObjectWatch(
                    self.api,
                    plural,
                    scope,
                    MANAGED_SELECTOR,
                    functools.partial(self._on_object, plural),
                    functools.partial(self._on_objects_listed, plural),
                    timeout_seconds=self.watch_timeout_seconds,
                )
                try:
                    await watch.list()
                except KubeNotFound as error:
                    self.unserved.add(kind)
                    log.warning(
                        "%s.%s is not served: %s jobs are refused: %s",
                        plural,
                        KUBEFLOW_GROUP,
                        kind,
                        error,
                        extra=self._extra(),
                    )
                    break
                watches.append(watch)
        if not watches:
            raise KubeNotFound(
                f"delegate mode needs the Training Operator's CRDs on {self.cluster} "
                f"(none of {', '.join(DELEGATED_PLURALS.values())} is served)",
                404,
                "NotFound",
            )
        return watches + await super()._initial_watches()

    async def _on_object(self, plural: str, event: str, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        job_uid = job_uid_of(obj)
        uid = str(metadata.get("uid") or "")
        if job_uid is None or not uid:
            return
        attempt = _attempt_of(obj)
        if event == "DELETED":
            self._objects.pop(uid, None)
            await self.job_statuses.put(DelegatedStatus(job_uid, attempt, None))
            return
        self._objects[uid] = (job_uid, attempt, plural, str(metadata.get("namespace")))
        await self.job_statuses.put(DelegatedStatus(job_uid, attempt, obj.get("status") or {}))

    def _on_objects_listed(self, plural: str, namespace: str | None, uids: set[str]) -> None:
        """A (re)list of one kind in one scope: objects gone meanwhile are reported gone."""
        for uid, (job_uid, attempt, kind, where) in list(self._objects.items()):
            if kind == plural and namespace in (None, where) and uid not in uids:
                del self._objects[uid]
                self.job_statuses.put_nowait(DelegatedStatus(job_uid, attempt, None))

    # -- the job's object ---------------------------------------------------------------

    def delegates(self, job: AnyJob) -> str | None:
        if job.kind in self.unserved:
            plural = DELEGATED_PLURALS[job.kind]
            return f"{self.cluster} does not serve {plural}.{KUBEFLOW_GROUP} (no CRD)"
        if job.kind in DELEGATED_PLURALS and job.API_VERSION == "kubeflow.org/v1":
            return None
        return (
            f"a worker in delegate mode hands kubeflow.org/v1 jobs to the Training Operator "
            f"({', '.join(DELEGATED_PLURALS)}); a {job.kind} is not one"
        )

    def makes_job_object(self, job: AnyJob) -> bool:
        return self.delegates(job) is None

    async def create_job_object(self, job: AnyJob, attempt: int) -> None:
        plural = DELEGATED_PLURALS[job.kind]
        namespace, name = job.metadata.namespace, job.metadata.name
        custom = self.api.custom
        body = job_object(job, attempt, self.managed_by)
        try:
            await self.api.send(
                "create",
                plural,
                namespace,
                custom.create_namespaced_custom_object,
                KUBEFLOW_GROUP,
                KUBEFLOW_VERSION,
                namespace,
                plural,
                body,
            )
            return
        except KubeConflict:
            pass
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
        if job_uid_of(found) != job.uid:
            owner = job_uid_of(found)
            whose = f"job uid {owner}" if owner else "not trainhub's"
            raise KubeConflict(
                f"{plural} {namespace}/{name} exists and is not this job's ({whose}): "
                "trainhub does not adopt it; delete it or rename the job",
                409,
                "AlreadyExists",
            )

    async def suspend_job_object(self, job: AnyJob, suspend: bool) -> None:
        plural = DELEGATED_PLURALS[job.kind]
        namespace, name = job.metadata.namespace, job.metadata.name
        try:
            await self.api.send(
                "patch",
                plural,
                namespace,
                self.api.custom.patch_namespaced_custom_object,
                KUBEFLOW_GROUP,
                KUBEFLOW_VERSION,
                namespace,
                plural,
                name,
                {"spec": {"runPolicy": {"suspend": suspend}}},
                _content_type=_MERGE_PATCH,
            )
        except KubeNotFound:
            log.warning(
                "%s %s/%s is gone: nothing to %s",
                plural,
                namespace,
                name,
                "suspend" if suspend else "resume",
                extra=self._extra(job.uid),
            )

    async def delete_job(self, job_uid: str, namespace: str | None = None) -> None:
        """The job's object first (so the operator makes no more pods), then whatever else
        carries its uid (its pods)."""
        selector = f"{LABEL_JOB_UID}={job_uid}"
        within = [namespace] if namespace is not None and self.namespaces is None else None
        for kind, plural in DELEGATED_PLURALS.items():
            if kind in self.unserved:
                continue
            delete, _, _ = custom_object_methods(self.api, KUBEFLOW_GROUP, KUBEFLOW_VERSION, plural)
            for obj in await self._list_objects(plural, selector, within):
                metadata = obj.get("metadata") or {}
                where, name = str(metadata.get("namespace")), str(metadata.get("name"))
                try:
                    await self.api.call(
                        "delete",
                        plural,
                        where,
                        delete,
                        name,
                        where,
                        propagation_policy="Background",
                    )
                except KubeNotFound:
                    continue
                log.info("deleted %s %s/%s", plural, where, name, extra=self._extra(job_uid))
        await super().delete_job(job_uid, namespace)

    async def _list_objects(
        self, plural: str, selector: str, within: list[str] | None = None
    ) -> list[dict[str, Any]]:
        _, everywhere, namespaced = custom_object_methods(
            self.api, KUBEFLOW_GROUP, KUBEFLOW_VERSION, plural
        )
        namespaces = within if within is not None else self.namespaces
        if namespaces is None:
            reply = await self.api.call("list", plural, None, everywhere, label_selector=selector)
            return list(reply.get("items") or [])
        items: list[dict[str, Any]] = []
        for namespace in namespaces:
            reply = await self.api.call(
                "list", plural, namespace, namespaced, namespace, label_selector=selector
            )
            items.extend(reply.get("items") or [])
        return items

    async def job_uids(self) -> set[str]:
        """Jobs with an object here, or pods (an object deleted before its pods)."""
        uids = await super().job_uids()
        served = [p for k, p in DELEGATED_PLURALS.items() if k not in self.unserved]
        listed = await asyncio.gather(
            *(self._list_objects(plural, MANAGED_SELECTOR) for plural in served),
            return_exceptions=True,
        )
        for objects in listed:
            if isinstance(objects, BaseException):
                raise objects
            uids.update(uid for uid in map(job_uid_of, objects) if uid is not None)
        return uids
