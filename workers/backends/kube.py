"""`kube`: a real Kubernetes cluster through kubernetes_asyncio, one kubeconfig context each.

Pods and headless services (and the ConfigMaps and launcher access some kinds need, and with a
gang scheduler the job's PodGroup) are created idempotently from their rendered manifests, our
pods are watched (list + watch, 410 relist) into observations, and capacity is read from the
nodes (followed by a watch) and every pod bound to them (listed for each heartbeat). Where the
cluster serves the job's kubeflow.org kind, the job's own CR is made first and owns the rest,
and is watched for a deletion, or a suspension, by someone else (kube_job_object.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bus.aiotasks import TaskOwner
from schemas.events import ListedPod
from schemas.kubeflow import AnyJob
from schemas.status import JobStatus
from workers.backends.base import Backend, Capacity, PodLogsUnavailable
from workers.backends.kube_capacity import TERMINAL_PHASES, job_uid_of, node_snapshots
from workers.backends.kube_client import (
    KubeApi,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    KubeRetryPolicy,
    connect,
)
from workers.backends.kube_job_object import JobObjects, JobObjectWatch, owned_by_job_object
from workers.backends.kube_nodes import NodeCache
from workers.backends.kube_pod_listing import listed_pod
from workers.backends.kube_resources import (
    JOB_RESOURCES,
    POD_GROUPS,
    access_objects,
    delete_method,
    list_methods,
)
from workers.backends.kube_watch import PodObserver, PodWatch
from workers.gang_scheduling import GangScheduling, PodGroupApi, PodGroupPlan, same_spec
from workers.rendering import (
    DEFAULT_CONTAINER_ANNOTATION,
    LABEL_JOB_UID,
    LABEL_MANAGED,
    OPERATOR_NAME,
    AccessPlan,
    ConfigMapPlan,
    PodPlan,
    SecretPlan,
    ServicePlan,
)

log = logging.getLogger(__name__)

MANAGED_SELECTOR = f"{LABEL_MANAGED}={OPERATOR_NAME}"
# What takes room on a node: pods bound to one that have not ended. Filtered by the apiserver
# (as kube-scheduler's own informer of assigned pods is), so a burst of pods still waiting for
# the scheduler costs a heartbeat nothing.
_TAKING_ROOM = ",".join(
    ["spec.nodeName!=", *(f"status.phase!={phase}" for phase in TERMINAL_PHASES)]
)
_LOG_TIMEOUT = 10.0
_DELETE_CONCURRENCY = 16
_UPDATE_TRIES = 5


@dataclass
class _KnownPod:
    namespace: str
    container: str | None
    uid: str | None = None


class KubeBackend(Backend):
    kind = "kube"
    keeps_pods = True
    init_containers = True
    owns_by_job_object = True
    """Whether each job gets its own Kubeflow object here where the cluster serves its kind
    (direct mode); a backend that hands the object to an operator makes its own."""

    def __init__(
        self,
        kubeconfig: str | Path,
        *,
        cluster: str,
        context: str | None = None,
        namespaces: Sequence[str] | None = None,
        retry: KubeRetryPolicy | None = None,
        watch_timeout_seconds: int = 300,
        gang_scheduling: GangScheduling | None = None,
    ) -> None:
        """`namespaces` is the allow-list the worker serves (None: all); writes stay inside it.
        `context` defaults to the kubeconfig's current context. `gang_scheduling`: every job
        gets a PodGroup of that scheduler, and its pods ask for it."""
        super().__init__()
        self.gang_scheduling = gang_scheduling
        self._job_resources = JOB_RESOURCES + ((POD_GROUPS,) if gang_scheduling else ())
        self.kubeconfig = Path(kubeconfig)
        self.context = context
        self.cluster = cluster
        self.namespaces = tuple(namespaces) if namespaces is not None else None
        self.retry = retry or KubeRetryPolicy()
        self.watch_timeout_seconds = watch_timeout_seconds
        self.watches: list[PodWatch] = []
        self.object_watches: list[JobObjectWatch] = []
        """The watches of the jobs' own objects (direct mode, a cluster with the CRDs)."""
        self.observer = PodObserver()
        self._api: KubeApi | None = None
        self._tasks = TaskOwner(f"kube-{cluster}")
        self._known: dict[str, dict[str, _KnownPod]] = {}
        """job uid -> pod name -> where the pod lives, for calls that only get the name (by
        job, so that deleting one job never walks every pod the cluster holds)."""
        self._reads_all_pods: bool | None = None
        """Whether the identity may list pods cluster-wide; None until first tried."""
        self._nodes: NodeCache | None = None
        self.job_objects: JobObjects | None = None
        """The jobs' own Kubeflow objects, once started (None: never made)."""

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            raise RuntimeError(f"KubeBackend for {self.cluster} is not started")
        return self._api

    def _extra(self, job_uid: str | None = None) -> dict[str, Any]:
        return {"cluster": self.cluster, "job": job_uid}

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        api_client, identity = await connect(self.kubeconfig, self.context)
        self._api = KubeApi(api_client, cluster=self.cluster, identity=identity, retry=self.retry)
        try:
            if self.owns_by_job_object:
                self.job_objects = await self._discover_job_objects()
            self.watches = await self._initial_watches()
            if self.job_objects is not None:
                self.object_watches = await self.job_objects.listed_watches(
                    self.namespaces, self.watch_timeout_seconds
                )
            nodes = NodeCache(self.api, timeout_seconds=self.watch_timeout_seconds)
            await nodes.load()
        except BaseException:
            await self.close()
            raise
        for watch in self.watches:
            self._tasks.spawn(watch.run(), f"watch-{watch.namespace or 'all'}")
        for objects in self.object_watches:
            scope = objects.namespace or "all"
            self._tasks.spawn(objects.run(), f"watch-{objects.resource}-{scope}")
        nodes.follow(self._tasks.spawn(nodes.watch.run(), "watch-nodes"))
        self._nodes = nodes
        scopes = ", ".join(w.namespace or "all namespaces" for w in self.watches)
        log.info("watching pods in %s", scopes, extra=self._extra())

    async def _discover_job_objects(self) -> JobObjects | None:
        """The kinds whose Kubeflow CRD the cluster serves; None when it serves none (or
        its discovery cannot be read): then nothing changes from a cluster without them."""
        objects = JobObjects(self.api, self.cluster, self.job_object_news)
        try:
            await objects.discover()
        except KubeError as error:
            if error.transient:
                raise
            log.warning("no Kubeflow job objects: %s", error, extra=self._extra())
            return None
        return objects if objects.served else None

    async def _initial_watches(self) -> list[PodWatch]:
        """One cluster-wide watch when the identity may, else one per allowed namespace; each
        lists first, so pods that exist already (adoption) are observed before start returns."""
        watch = self._watch(None)
        try:
            await watch.list()
            self._reads_all_pods = True
            return [watch]
        except KubeForbidden as error:
            if self.namespaces is None:
                raise
            self._reads_all_pods = False
            log.warning(
                "watching per namespace; capacity counts only pods in %s: %s",
                ", ".join(self.namespaces),
                error,
                extra=self._extra(),
            )
        watches = [self._watch(namespace) for namespace in self.namespaces]
        for namespaced in watches:
            await namespaced.list()
        return watches

    def _watch(self, namespace: str | None) -> PodWatch:
        return PodWatch(
            self.api,
            namespace,
            MANAGED_SELECTOR,
            self._on_pod,
            self._on_resync,
            timeout_seconds=self.watch_timeout_seconds,
        )

    async def close(self) -> None:
        await self._tasks.cancel_all()
        self._nodes = None
        if self._api is not None:
            await self._api.close()
            self._api = None

    # -- watching -------------------------------------------------------------------------

    def _allowed(self, namespace: str | None) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    async def _on_pod(self, event: str, pod: Mapping[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        namespace = metadata.get("namespace")
        if not self._allowed(namespace):
            return
        uid = str(metadata.get("uid") or "")
        job_uid = job_uid_of(pod)
        name = str(metadata.get("name"))
        if event == "DELETED":
            self.observer.forget(uid)
            pods = self._known.get(job_uid or "", {})
            known = pods.get(name)
            # A pod re-created under the same name (a restart) keeps its entry.
            if known is not None and known.uid in (uid, None):
                del pods[name]
                if not pods:
                    del self._known[job_uid or ""]
            return
        if job_uid is not None and namespace:
            container = (metadata.get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
            self._known.setdefault(job_uid, {})[name] = _KnownPod(str(namespace), container, uid)
        observation = self.observer.observe(pod)
        if observation is not None:
            log.debug(
                "pod %s is %s", observation.name, observation.phase, extra=self._extra(job_uid)
            )
            await self.observations.put(observation)

    def _on_resync(self, namespace: str | None, uids: set[str]) -> None:
        self.observer.retain(uids, namespace)

    # -- objects --------------------------------------------------------------------------

    async def create_config_map(self, job_uid: str, config_map: ConfigMapPlan) -> None:
        await self._create(
            job_uid,
            "configmaps",
            config_map.namespace,
            config_map.name,
            self.api.core.create_namespaced_config_map,
            config_map.manifest(),
        )

    async def create_secret(self, job_uid: str, secret: SecretPlan) -> None:
        await self._create(
            job_uid,
            "secrets",
            secret.namespace,
            secret.name,
            self.api.core.create_namespaced_secret,
            secret.manifest(),
        )

    async def update_config_map(self, job_uid: str, config_map: ConfigMapPlan) -> None:
        """A strategic-merge patch of its data (the keys given replace theirs, the others
        stay); a ConfigMap someone deleted is made again whole. A refusal does not fail the
        job (its pods run without the update): it is logged with what the identity lacks."""
        try:
            await self.api.send(
                "patch",
                "configmaps",
                config_map.namespace,
                self.api.core.patch_namespaced_config_map,
                config_map.name,
                config_map.namespace,
                {"data": config_map.data},
            )
        except KubeNotFound:
            await self.create_config_map(job_uid, config_map)
        except KubeForbidden as error:
            log.warning(
                "ConfigMap %s/%s not updated (re-apply `trainhub member-rbac`): %s",
                config_map.namespace,
                config_map.name,
                error,
                extra=self._extra(job_uid),
            )

    async def create_access(self, job_uid: str, access: AccessPlan) -> None:
        """ServiceAccount, Role, then the RoleBinding that joins them. The apiserver lets us
        create a Role only with permissions we hold ourselves (RBAC escalation prevention),
        which is why the worker's own Role carries `pods/exec`."""
        for resource, name, method, manifest in access_objects(self.api, access):
            await self._create(job_uid, resource, access.namespace, name, method, manifest)

    async def create_service(self, job_uid: str, service: ServicePlan) -> None:
        core = self.api.core
        await self._create(
            job_uid,
            "services",
            service.namespace,
            service.name,
            core.create_namespaced_service,
            service.manifest(),
        )

    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        manifest = pod.manifest()
        known = _KnownPod(pod.namespace, pod.default_container)
        self._known.setdefault(job_uid, {})[pod.name] = known
        await self._create(
            job_uid, "pods", pod.namespace, pod.name, self.api.core.create_namespaced_pod, manifest
        )

    # -- the job's own object -------------------------------------------------------------

    async def ensure_job_object(self, job: AnyJob, attempt: int) -> None:
        if self.job_objects is not None:
            await self.job_objects.ensure(job, attempt)

    def makes_job_object(self, job: AnyJob) -> bool:
        return self.job_objects is not None and self.job_objects.wanted(job)

    async def write_job_status(self, job: AnyJob, status: JobStatus) -> None:
        if self.job_objects is not None:
            await self.job_objects.write_status(job, status)

    def _owned(self, job_uid: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """The manifest with the job's CR as its controller, where the job has one."""
        ref = self.job_objects.ref(job_uid) if self.job_objects is not None else None
        if ref is None or not ref.uid:
            return manifest
        metadata = {**manifest.get("metadata", {}), "ownerReferences": [ref.owner_reference()]}
        return {**manifest, "metadata": metadata}

    # -- PodGroups ------------------------------------------------------------------------

    @property
    def _pod_group_api(self) -> PodGroupApi | None:
        return self.gang_scheduling.api if self.gang_scheduling is not None else None

    async def create_pod_group(self, job_uid: str, group: PodGroupPlan) -> None:
        """Create it; one that exists already must be this job's, and gets the spec it should
        have (upstream's sync: the spec written whole when it differs, Volcano's queue kept)."""
        api, namespace = group.gang.api, group.namespace
        priorities = await self._priorities(job_uid, group.priority_classes())
        custom = self.api.custom
        try:
            await self.api.send(
                "create",
                api.plural,
                namespace,
                custom.create_namespaced_custom_object,
                api.group,
                api.version,
                namespace,
                api.plural,
                self._owned(job_uid, group.manifest(priorities)),
            )
            return
        except KubeConflict:
            pass
        except KubeError as error:
            log.error(
                "cannot create %s %s/%s: %s",
                api.plural,
                namespace,
                group.name,
                error,
                extra=self._extra(job_uid),
            )
            raise
        for _ in range(_UPDATE_TRIES):
            found = await self.api.call(
                "get",
                api.plural,
                namespace,
                custom.get_namespaced_custom_object,
                api.group,
                api.version,
                namespace,
                api.plural,
                group.name,
            )
            metadata = found.get("metadata") or {}
            owner = (metadata.get("labels") or {}).get(LABEL_JOB_UID)
            if owner != job_uid:
                whose = f"job uid {owner}" if owner else "not trainhub's"
                raise KubeConflict(
                    f"{api.plural} {namespace}/{group.name} exists and is not this job's "
                    f"({whose}): trainhub does not adopt it; delete it or rename the job",
                    409,
                    "AlreadyExists",
                )
            spec = group.spec(priorities, existing=found.get("spec"))
            if same_spec(spec, found.get("spec") or {}):
                return
            metadata["labels"] = {**(metadata.get("labels") or {}), **group.labels}
            try:
                await self.api.send(
                    "update",
                    api.plural,
                    namespace,
                    custom.replace_namespaced_custom_object,
                    api.group,
                    api.version,
                    namespace,
                    api.plural,
                    group.name,
                    {**found, "metadata": metadata, "spec": spec},
                )
            except KubeConflict:
                continue  # changed since read: read it again
            log.info("updated PodGroup %s/%s", namespace, group.name, extra=self._extra(job_uid))
            return
        raise KubeConflict(f"{api.plural} {namespace}/{group.name} keeps changing underneath")

    async def delete_pod_group(self, job_uid: str, group: PodGroupPlan) -> None:
        await self._delete(job_uid, POD_GROUPS, group.namespace, group.name)

    async def _priorities(self, job_uid: str, names: set[str]) -> dict[str, int]:
        """The values of the PriorityClasses that order a PodGroup's computed minResources;
        one that cannot be read counts 0, as upstream counts it."""
        values: dict[str, int] = {}
        for name in sorted(names):
            try:
                found = await self.api.call(
                    "get",
                    "priorityclasses",
                    None,
                    self.api.scheduling.read_priority_class,
                    name,
                )
            except (KubeNotFound, KubeForbidden) as error:
                log.warning(
                    "PriorityClass %s counts 0 in minResources: %s",
                    name,
                    error,
                    extra=self._extra(job_uid),
                )
                continue
            value = found.get("value")
            if isinstance(value, int):
                values[name] = value
        return values

    async def _create(
        self,
        job_uid: str,
        resource: str,
        namespace: str,
        name: str,
        method: Callable[..., Awaitable[Any]],
        manifest: dict[str, Any],
    ) -> None:
        manifest = self._owned(job_uid, manifest)
        try:
            await self.api.send("create", resource, namespace, method, namespace, manifest)
        except KubeConflict:
            log.debug(
                "%s %s/%s exists already", resource, namespace, name, extra=self._extra(job_uid)
            )
            if resource in ("pods", "services"):  # what would pass for a replica
                await self._check_ours(job_uid, resource, namespace, name)
        except KubeError as error:
            log.error(
                "cannot create %s %s/%s: %s",
                resource,
                namespace,
                name,
                error,
                extra=self._extra(job_uid),
            )
            raise

    async def _check_ours(self, job_uid: str, resource: str, namespace: str, name: str) -> None:
        """A pod or service of that name exists: it must be this job's (created earlier, an
        idempotent create), not someone else's, which would pass for one of the job's replicas
        for as long as it lives; upstream's operator does not adopt what it does not control.
        (A ServiceAccount the user named for an MPI launcher may well exist: not checked.)"""
        core = self.api.core
        method = core.read_namespaced_pod if resource == "pods" else core.read_namespaced_service
        try:
            found = await self.api.call("get", resource, namespace, method, name, namespace)
        except (KubeForbidden, KubeNotFound):
            return  # cannot tell (or gone meanwhile): as before, taken as ours
        labels = (found.get("metadata") or {}).get("labels") or {}
        owner = labels.get(LABEL_JOB_UID)
        if owner != job_uid:
            whose = f"job uid {owner}" if owner else "not trainhub's"
            raise KubeConflict(
                f"{resource} {namespace}/{name} exists and is not this job's ({whose}): "
                "trainhub does not adopt it; delete it or rename the job",
                409,
                "AlreadyExists",
            )

    async def _delete(self, job_uid: str, resource: str, namespace: str, name: str) -> None:
        options: dict[str, Any] = {"propagation_policy": "Background"}
        method = delete_method(self.api, resource, self._pod_group_api)
        if resource == "pods":
            options["grace_period_seconds"] = 0
        try:
            await self.api.call("delete", resource, namespace, method, name, namespace, **options)
        except KubeNotFound:
            return
        log.debug("deleted %s %s/%s", resource, namespace, name, extra=self._extra(job_uid))

    async def delete_pod(self, job_uid: str, name: str, namespace: str) -> None:
        await self._delete(job_uid, "pods", namespace, name)
        await self._delete(job_uid, "services", namespace, name)

    async def delete_job(self, job_uid: str, namespace: str | None = None) -> None:
        selector = f"{LABEL_JOB_UID}={job_uid}"
        # The job's own namespace when known: a worker without --namespace lists every
        # namespace, which an identity bound to some namespaces may not do.
        within = [namespace] if namespace is not None and self.namespaces is None else None
        targets = [
            (resource, obj)
            for resource in self._job_resources
            for obj in await self._list_ours(resource, selector, within)
        ]
        limit = asyncio.Semaphore(_DELETE_CONCURRENCY)

        async def delete(resource: str, obj: Mapping[str, Any]) -> None:
            metadata = obj.get("metadata") or {}
            async with limit:
                await self._delete(
                    job_uid, resource, str(metadata.get("namespace")), str(metadata.get("name"))
                )

        if self.job_objects is not None:
            # The job's own object first: its garbage collector (where one runs) then takes
            # whatever of the job is made meanwhile.
            owners = [owned_by_job_object(obj) for _, obj in targets]
            await self.job_objects.delete(job_uid, [ref for ref in owners if ref is not None])
        await asyncio.gather(*(delete(resource, obj) for resource, obj in targets))
        # A sweep does not know the namespace of a job it lost: its other objects say it.
        found_in = {str((obj.get("metadata") or {}).get("namespace")) for _, obj in targets}
        await self._delete_secrets(job_uid, selector, namespace, found_in)
        self._known.pop(job_uid, None)
        log.info("deleted %d objects", len(targets), extra=self._extra(job_uid))

    async def _delete_secrets(
        self, job_uid: str, selector: str, namespace: str | None, found_in: set[str]
    ) -> None:
        """The job's Secrets (a TrainJob's MPI SSH keys) by label, as one `deletecollection`
        per namespace: the worker may create and delete Secrets, never read or list them. The
        namespaces: the job's when known, else those its other objects were found in and the
        worker's own."""
        if namespace is not None:
            namespaces = [namespace]
        else:
            namespaces = sorted(found_in | set(self.namespaces or []))
        for where in namespaces:
            await self.api.call(
                "deletecollection",
                "secrets",
                where,
                self.api.core.delete_collection_namespaced_secret,
                where,
                label_selector=selector,
            )

    async def _list_ours(
        self, resource: str, selector: str, within: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Our objects of one kind matching `selector`, in the allowed namespaces (or only
        `within` these)."""
        items: list[dict[str, Any]] = []
        everywhere, namespaced = list_methods(self.api, resource, self._pod_group_api)
        namespaces = within if within is not None else self.namespaces
        if namespaces is None:
            reply = await self.api.call("list", resource, None, everywhere, label_selector=selector)
            return list(reply.get("items") or [])
        for namespace in namespaces:
            reply = await self.api.call(
                "list", resource, namespace, namespaced, namespace, label_selector=selector
            )
            items.extend(reply.get("items") or [])
        return items

    # -- capacity -------------------------------------------------------------------------

    async def capacity(self) -> Capacity:
        """Nodes from the node watch, pods listed now: what is bound changes with every job,
        and the list also proves the apiserver answers (a silent one must stop heartbeats)."""
        if self._nodes is None:
            raise RuntimeError(f"KubeBackend for {self.cluster} is not started")
        pods = await self._active_pods()
        snapshots, jobs = node_snapshots(self._nodes.nodes(), pods)
        return Capacity(snapshots, jobs)

    async def _active_pods(self) -> list[dict[str, Any]]:
        """Every pod bound to a node that has not ended (anyone's: they all take room)."""
        core = self.api.core
        if self._reads_all_pods is not False:
            try:
                reply = await self.api.call(
                    "list",
                    "pods",
                    None,
                    core.list_pod_for_all_namespaces,
                    field_selector=_TAKING_ROOM,
                )
                self._reads_all_pods = True
                return list(reply.get("items") or [])
            except KubeForbidden as error:
                if self.namespaces is None:
                    raise
                self._reads_all_pods = False
                log.warning(
                    "capacity counts only pods in %s: %s",
                    ", ".join(self.namespaces),
                    error,
                    extra=self._extra(),
                )
        pods: list[dict[str, Any]] = []
        for namespace in self.namespaces or ():
            reply = await self.api.call(
                "list",
                "pods",
                namespace,
                core.list_namespaced_pod,
                namespace,
                field_selector=_TAKING_ROOM,
            )
            pods.extend(reply.get("items") or [])
        return pods

    async def job_uids(self) -> set[str]:
        # Every kind at once: a sweep holds up every job's work while it runs.
        listed = await asyncio.gather(
            *(self._list_ours(resource, MANAGED_SELECTOR) for resource in JOB_RESOURCES),
            return_exceptions=True,
        )
        uids: set[str] = set()
        found: list[dict[str, Any]] = []
        for objects in listed:
            if isinstance(objects, BaseException):
                raise objects
            uids.update(uid for uid in map(job_uid_of, objects) if uid is not None)
            found.extend(objects)
        if self.job_objects is not None:
            self.job_objects.note_owners(found)
        return uids

    def forget_job(self, job_uid: str) -> None:
        if self.job_objects is not None:
            self.job_objects.forget(job_uid)

    async def job_pod_names(self, job_uid: str) -> list[str]:
        pods = await self._list_ours("pods", f"{LABEL_JOB_UID}={job_uid}")
        return sorted(str((p.get("metadata") or {}).get("name")) for p in pods)

    async def job_pods(self, job_uid: str) -> list[ListedPod]:
        # The one list call `job_pod_names` makes: each pod's status comes with it.
        pods = await self._list_ours("pods", f"{LABEL_JOB_UID}={job_uid}")
        return sorted((listed_pod(p) for p in pods), key=lambda listed: listed.name)

    async def pod_logs(self, job_uid: str, name: str) -> str:
        known = self._known.get(job_uid, {}).get(name)
        fallback = self.namespaces[0] if self.namespaces else "default"
        namespace = known.namespace if known is not None else fallback
        container = known.container if known is not None else None
        options: dict[str, Any] = {"container": container} if container else {}
        try:
            return await self.api.text(
                "get",
                "pods/log",
                namespace,
                self.api.core.read_namespaced_pod_log,
                name,
                namespace,
                _request_timeout=_LOG_TIMEOUT,
                **options,
            )
        except KubeError as error:
            raise PodLogsUnavailable(
                f"no logs for {namespace}/{name} on {self.cluster}: {error}"
            ) from error
