"""`trainhub get jobs|job|pytorchjobs|... [NAME...]`: list jobs as kubectl does, with names,
per-kind resource names, label selectors (`-l`), `-o text|wide|json|yaml|name` (json and yaml
a Kubernetes `List` of job objects, or the one object asked for by name) and `-w` to watch."""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.table import Table

from schemas.events import JobStatusUpdate
from schemas.job_controls import TRAINJOB_KIND
from schemas.kubeflow import JOB_CLASSES
from schemas.status import JobPhase
from trainhub.cli_help import examples
from trainhub.cli_jobs import (
    _fail,
    _with_client,
    console,
    err_console,
    format_age,
    print_structured,
)
from trainhub.cli_settings import READ_BUS, with_settings
from trainhub.sdk import AsyncTrainHubClient
from trainhub.sdk_errors import JobNotFoundError
from trainhub.sdk_view import TrainHubJob
from trainhub.settings import TrainhubSettings
from trainhub.training_documents import to_document
from trainhub.training_jobs import job_object

GROUP = "kubeflow.org"


class GetOutput(StrEnum):
    text = "text"
    wide = "wide"
    json = "json"
    yaml = "yaml"
    name = "name"


# -- label selectors ----------------------------------------------------------------------

_REQUIREMENT = re.compile(
    r"^\s*(?P<not>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9_.-]*)"
    r"|\s+(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)


def parse_selector(text: str) -> list[Callable[[Mapping[str, str]], bool]]:
    """Kubernetes label selector syntax: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
    `k notin (a,b)`, comma-separated, all of which must hold. ValueError naming the part."""
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for part in _split_requirements(text):
        found = _REQUIREMENT.match(part)
        if found is None or (found["not"] and (found["op"] or found["set"])):
            raise ValueError(f"invalid label selector requirement {part.strip()!r}")
        key, op, value = found["key"], found["op"], found["value"]
        if found["not"]:
            checks.append(lambda labels, k=key: k not in labels)  # type: ignore[misc]
        elif op in ("=", "=="):
            checks.append(lambda labels, k=key, v=value: labels.get(k) == v)  # type: ignore[misc]
        elif op == "!=":
            checks.append(lambda labels, k=key, v=value: labels.get(k) != v)  # type: ignore[misc]
        elif found["set"]:
            values = {v.strip() for v in found["values"].split(",") if v.strip()}
            if found["set"] == "in":
                checks.append(lambda labels, k=key, vs=values: labels.get(k) in vs)  # type: ignore[misc]
            else:
                checks.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)  # type: ignore[misc]
        else:
            checks.append(lambda labels, k=key: k in labels)  # type: ignore[misc]
    return checks


def _split_requirements(text: str) -> list[str]:
    """Split at commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p for p in [*parts, current] if p.strip()]


def labels_of(job: TrainHubJob) -> dict[str, str]:
    metadata = (job.spec or {}).get("metadata") or {}
    labels = metadata.get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


# -- objects ---------------------------------------------------------------------------------


def job_item(job: TrainHubJob) -> dict[str, Any]:
    """The job as kubectl would print its object: the document as submitted with
    `metadata.uid` and `creationTimestamp`, its Kubeflow `status`, and trainhub's view of it
    (phase, cluster, attempt, queue, priorityClass and the priority the hub resolved it to,
    reason, message) under `status.trainhub`."""
    document: dict[str, Any]
    if job.kind == TRAINJOB_KIND:
        document = trainjob_object(job)
    else:
        document = to_document(job_object(job, job.kind or "PyTorchJob"))
    document["status"]["trainhub"] = {
        "phase": job.phase.value if job.phase else "Submitted",
        "cluster": job.cluster,
        "attempt": job.attempt,
        "queue": job.queue or "default",
        "priorityClass": job.priority_class,
        "priority": job.priority,
        "reason": job.reason,
        "message": job.message,
    }
    if job.kind == TRAINJOB_KIND and job.status.replicaStatuses:
        document["status"]["trainhub"]["replicaStatuses"] = {
            rtype: counts.model_dump(mode="json", exclude_none=True)
            for rtype, counts in job.status.replicaStatuses.items()
        }
    return document


def trainjob_object(job: TrainHubJob) -> dict[str, Any]:
    """A TrainJob as Kubeflow Trainer's apiserver holds it: its status the conditions
    (metav1.Condition: type, status, reason, message, lastTransitionTime), in upstream's
    words, and `jobsStatus` (per replicated job: name, ready, succeeded, failed, active,
    suspended); trainhub's pod counts per replicated job go under `status.trainhub`."""
    document: dict[str, Any] = copy.deepcopy(job.spec) if job.spec else {}
    document.setdefault("apiVersion", JOB_CLASSES[TRAINJOB_KIND].API_VERSION)
    document.setdefault("kind", TRAINJOB_KIND)
    metadata = document.setdefault("metadata", {})
    metadata.setdefault("name", job.name)
    metadata.setdefault("namespace", job.namespace)
    metadata["uid"] = job.uid
    if job.created is not None:
        metadata["creationTimestamp"] = job.created.isoformat()
    conditions = [
        {
            key: value
            for key, value in condition.model_dump(
                mode="json", exclude_none=True, exclude={"lastUpdateTime"}
            ).items()
        }
        for condition in job.conditions
    ]
    if job.phase in (JobPhase.REJECTED,) and not any(c["type"] == "Failed" for c in conditions):
        conditions.append(
            {"type": "Failed", "status": "True", "reason": job.reason, "message": job.message}
        )
    document["status"] = {"conditions": conditions} if conditions else {}
    if job.status.jobsStatus:
        document["status"]["jobsStatus"] = [
            entry.model_dump(mode="json") for entry in job.status.jobsStatus
        ]
    return document


def job_list(jobs: list[TrainHubJob]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [job_item(j) for j in jobs],
    }


def resource_name(job: TrainHubJob | JobStatusUpdate) -> str:
    """`-o name`: `pytorchjob.kubeflow.org/mnist` (`trainjob.trainer.kubeflow.org/...`), as
    kubectl names objects."""
    known = JOB_CLASSES.get(job.kind or "")
    group = known.API_VERSION.split("/")[0] if known is not None else GROUP
    return f"{(job.kind or 'job').lower()}.{group}/{job.name or job.uid}"


# -- tables ----------------------------------------------------------------------------------

_COLUMNS = ["NAMESPACE", "NAME", "KIND", "QUEUE", "PHASE", "CLUSTER", "AGE"]
_WIDE = ["PRIORITY", "ATTEMPT", "UID", "STATE", "REASON", "MESSAGE"]
"""STATE: the type of the latest condition, as upstream's printer columns show it
(`.status.conditions[-1:].type`: Created, Suspended, Complete, Failed for a TrainJob)."""


def _row(job: TrainHubJob | JobStatusUpdate, created: datetime | None, wide: bool) -> list[str]:
    phase = job.phase.value if job.phase else "Submitted"
    row = [
        job.namespace or "-",
        job.name or "-",
        job.kind or "-",
        job.queue or "default",
        phase,
        job.cluster or "-",
        format_age(created),
    ]
    if wide:
        conditions = job.status.conditions if job.status is not None else []
        state = conditions[-1].type if conditions else "-"
        row += [format_priority(job), str(job.attempt), job.uid, state]
        row += [job.reason or "", job.message or ""]
    return row


_PRIORITY = ("priority_class", "priority")


def format_priority(job: TrainHubJob | JobStatusUpdate) -> str:
    """`100 (high)`: the priority the hub resolved and the class it came from; `0` for the
    default; `? (nosuch)` for a class the hub does not know; `-` before the hub's word."""
    number = "-" if job.priority is None else str(job.priority)
    if job.priority_class is None:
        return number
    return f"{'?' if job.priority is None and job.phase else number} ({job.priority_class})"


def _table(wide: bool) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in _COLUMNS + (_WIDE if wide else []):
        table.add_column(column, overflow="fold")
    return table


def print_jobs(jobs: list[TrainHubJob], output: GetOutput, *, one: bool) -> None:
    if output in (GetOutput.json, GetOutput.yaml):
        payload = job_item(jobs[0]) if one else job_list(jobs)
        print_structured(payload, output.value)
        return
    if output == GetOutput.name:
        for job in jobs:
            console.print(resource_name(job), highlight=False)
        return
    if not jobs:
        err_console.print("No resources found.")
        return
    table = _table(output == GetOutput.wide)
    for job in jobs:
        table.add_row(*_row(job, job.created, output == GetOutput.wide))
    console.print(table)


# -- the command -----------------------------------------------------------------------------


def _select(
    jobs: list[TrainHubJob],
    kind: str | None,
    checks: list[Callable[[Mapping[str, str]], bool]],
) -> list[TrainHubJob]:
    return [
        j
        for j in jobs
        if (kind is None or j.kind == kind) and all(check(labels_of(j)) for check in checks)
    ]


async def _named(
    client: AsyncTrainHubClient, names: list[str], namespace: str | None, kind: str | None
) -> list[TrainHubJob]:
    found: list[TrainHubJob] = []
    for name in names:
        job = await client.get_job(name, namespace)
        if kind is not None and job.kind != kind:
            raise JobNotFoundError(f"{job.key} is a {job.kind}, not a {kind}")
        found.append(job)
    return found


async def _watch(
    client: AsyncTrainHubClient,
    shown: list[TrainHubJob],
    output: GetOutput,
    keep: Callable[[JobStatusUpdate], bool],
    timeout: float | None,
) -> None:
    """After the list, one line per status change of a job the list's filters keep, until
    interrupted (or `timeout` seconds), as `kubectl get -w` prints them."""
    wide = output == GetOutput.wide
    created = {j.uid: j.created for j in shown}
    # Workers' statuses say nothing of priority: a job's rows keep what the hub last said.
    priorities = {j.uid: (j.priority_class, j.priority) for j in shown}

    async def follow() -> None:
        async for event in client.stream(from_time=datetime.now(UTC)):
            update = event.update
            if not keep(update):
                continue
            if update.priority_class is None and update.priority is None:
                known = priorities.get(update.uid, (None, None))
                update = update.model_copy(update=dict(zip(_PRIORITY, known, strict=True)))
            else:
                priorities[update.uid] = (update.priority_class, update.priority)
            first = created.setdefault(update.uid, event.time)
            if output == GetOutput.name:
                console.print(resource_name(update), highlight=False)
            else:
                table = Table(box=None, show_header=False, pad_edge=False)
                for _ in _COLUMNS + (_WIDE if wide else []):
                    table.add_column(overflow="fold")
                table.add_row(*_row(update, first, wide))
                console.print(table)

    try:
        await asyncio.wait_for(follow(), timeout)
    except TimeoutError:
        return


def get_jobs_command(kind: str | None, resource: str) -> Callable[..., None]:
    """`get <resource>`: every job (`kind` None) or the jobs of one Kubeflow kind."""

    def command(
        settings: TrainhubSettings,
        names: Annotated[
            list[str] | None,
            typer.Argument(
                help="Only these jobs: NAME, NAMESPACE/NAME or uid.", show_default=False
            ),
        ] = None,
        namespace: Annotated[
            str | None,
            typer.Option("--namespace", "-n", help="Only this namespace (default all)."),
        ] = None,
        queue: Annotated[str | None, typer.Option(help="Only jobs of this queue.")] = None,
        selector: Annotated[
            str | None,
            typer.Option(
                "--selector",
                "-l",
                help="Label selector, as kubectl's: key=value, key!=value, key, !key, "
                "key in (a,b); comma-separated, all must hold.",
            ),
        ] = None,
        output: Annotated[GetOutput, typer.Option("-o", "--output")] = GetOutput.text,
        watch: Annotated[
            bool,
            typer.Option("--watch", "-w", help="After the list, print each change as it comes."),
        ] = False,
        watch_timeout: Annotated[
            float | None,
            typer.Option(help="With -w: stop after this many seconds (default: until Ctrl-C)."),
        ] = None,
    ) -> None:
        try:
            checks = parse_selector(selector or "")
        except ValueError as exc:
            raise _fail(str(exc), 2) from None
        wanted = list(names or [])

        uids: set[str] = set()
        """The jobs shown so far: a change of one of them is always shown."""

        def keep(update: JobStatusUpdate) -> bool:
            if update.uid in uids:
                return True
            if wanted or (namespace is not None and update.namespace != namespace):
                return False
            if queue is not None and (update.queue or "default") != queue:
                return False
            if kind is not None and update.kind != kind:
                return False
            # Labels come with a job's document, on its first (Queued) status.
            labels = ((update.job or {}).get("metadata") or {}).get("labels") or {}
            if checks and not all(c(labels) for c in checks):
                return False
            uids.add(update.uid)
            return True

        async def work(client: AsyncTrainHubClient) -> list[TrainHubJob]:
            if wanted:
                jobs = await _named(client, wanted, namespace, kind)
            else:
                jobs = await client.list_jobs(namespace=namespace, queue=queue)
            jobs = _select(jobs, kind, checks)
            uids.update(j.uid for j in jobs)
            print_jobs(jobs, output, one=len(wanted) == 1 and not watch)
            if watch:
                await _watch(client, jobs, output, keep, watch_timeout)
            return jobs

        _with_client(settings, work)

    command.__name__ = command.__qualname__ = f"get_{resource}"
    command.__doc__ = (
        "List jobs with their phase and cluster, as `kubectl get` lists objects: "
        "`-o wide` adds uid, attempt and message; `-o json|yaml` prints a Kubernetes List "
        "of the job objects (the object itself for one NAME); `-o name` prints "
        f"KIND.{GROUP}/NAME."
        if kind is None
        else f"List {kind}s (the options of `trainhub get jobs`)."
    )
    return with_settings(*READ_BUS)(command)


def register(get_app: typer.Typer) -> None:
    """`get jobs` (and `job`), and `get <kind>s` (and `<kind>`) for each Kubeflow kind."""
    resources: list[tuple[str | None, str, bool]] = [(None, "jobs", False), (None, "job", True)]
    for known in JOB_CLASSES:
        resources += [(known, f"{known.lower()}s", False), (known, known.lower(), True)]
    for kind, resource, hidden in resources:
        plural = resource if resource.endswith("s") else f"{resource}s"
        get_app.command(
            resource,
            hidden=hidden,
            epilog=examples(
                f"trainhub get {plural}",
                f"trainhub get {resource} mnist -o yaml",
                f"trainhub get {plural} -n team-a -l team=vision -o wide",
                f"trainhub get {plural} -w",
            ),
        )(get_jobs_command(kind, resource))
