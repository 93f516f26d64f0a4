"""`trainhub get jobs|clusters`, `trainhub describe job` and `trainhub logs`: read what runs
where, as kubectl shows objects, through the Python SDK.

Exit codes: 0 done; 1 the request could not be served (no logs: the job runs nowhere or its
worker did not answer); 2 usage or connection error (bad flags, no bootstrap, Kafka refused
or unreachable); 3 no such job.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml
from rich.console import Console
from rich.table import Table

from bus.base import BusError, UnknownTopicError
from schemas.cluster import ClusterSnapshot
from schemas.errors import ContractError
from schemas.job_parsing import parse_placed_job
from schemas.kubeflow import AnyJob
from schemas.quantity import format_quantity
from schemas.trainjob import TrainJob
from trainhub.cli_help import examples
from trainhub.cli_settings import READ_BUS, with_settings
from trainhub.console_view import decision_table, error_text
from trainhub.sdk import AsyncTrainHubClient
from trainhub.sdk_errors import JobNotFoundError, LogsUnavailableError
from trainhub.sdk_functions import FUNCTION_ANNOTATION
from trainhub.sdk_view import TrainHubJob
from trainhub.settings import TrainhubSettings
from workers.frameworks import adapter_for

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

GPU = "nvidia.com/gpu"
_GIB = Decimal(2**30)
_T = TypeVar("_T")

# Piped output is read by scripts and tests: wide enough that table cells are not wrapped.
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200, markup=False)
err_console = Console(stderr=True, soft_wrap=True, markup=False)

get_app = typer.Typer(
    help="List jobs, member clusters or TrainJob runtimes.",
    no_args_is_help=True,
    epilog=examples(
        "trainhub get jobs",
        "trainhub get pytorchjobs -n team-a -l team=vision -o wide",
        "trainhub get job mnist -o yaml",
        "trainhub get jobs -w",
        "trainhub get clusters -o json",
        "trainhub get runtimes -o wide",
    ),
)
describe_app = typer.Typer(
    help="Show one object in detail.",
    no_args_is_help=True,
    epilog=examples("trainhub describe job default/mnist"),
)


class ListOutput(StrEnum):
    text = "text"
    wide = "wide"
    json = "json"
    yaml = "yaml"


class DetailOutput(StrEnum):
    text = "text"
    json = "json"
    yaml = "yaml"


def register(app: typer.Typer) -> None:
    """Add `get`, `describe`, `update` and `logs` to the `trainhub` command."""
    from trainhub import cli_get_jobs  # it builds on this module's helpers

    cli_get_jobs.register(get_app)
    app.add_typer(get_app, name="get")
    app.command(
        "update",
        epilog=examples(
            "trainhub update jaxjob.yaml",
            "trainhub update jaxjob.yaml -n team-a --bootstrap localhost:9092",
        ),
    )(update)
    app.add_typer(describe_app, name="describe")
    app.command(
        "logs",
        epilog=examples(
            "trainhub logs mnist",
            "trainhub logs team-a/mnist -f",
            "trainhub logs mnist --pod mnist-worker-1 --tail 20",
        ),
    )(logs)


def _fail(message: str, code: int) -> typer.Exit:
    err_console.print(error_text(message), highlight=False)
    return typer.Exit(code)


def _with_client(
    settings: TrainhubSettings, work: Callable[[AsyncTrainHubClient], Awaitable[_T]]
) -> _T:
    """Run `work` with a connected client; map the SDK's errors to the exit codes."""
    if not settings.bootstrap:
        raise _fail(
            "this command needs Kafka: pass --bootstrap HOST:PORT or set TRAINHUB_BOOTSTRAP "
            "(`trainhub sandbox up` starts a local broker)",
            EXIT_USAGE,
        )

    async def main() -> _T:
        # These commands only read, or act on jobs that exist: a mistyped --topic-prefix
        # is an error naming the missing topic, not a new set of empty topics.
        async with AsyncTrainHubClient(settings=settings, create_topics=False) as client:
            return await work(client)

    try:
        return asyncio.run(main())
    except UnknownTopicError as exc:
        hint = (
            f"no trainhub topics with prefix {settings.topic_prefix!r} on this broker yet (a "
            "hub or worker creates them at start; see --topic-prefix)"
        )
        raise _fail(f"{exc}: {hint}", EXIT_USAGE) from None
    except BusError as exc:
        raise _fail(str(exc), EXIT_USAGE) from None
    except JobNotFoundError as exc:
        raise _fail(str(exc), EXIT_NOT_FOUND) from None
    except LogsUnavailableError as exc:
        raise _fail(str(exc), EXIT_FAILED) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def print_structured(payload: Any, output: str) -> None:
    """`-o json` (else YAML) of a JSON-compatible payload."""
    if output == "json":
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(payload, sort_keys=False))


def format_age(since: datetime | None, now: datetime | None = None) -> str:
    """kubectl's way: 45s, 12m, 3h, 5d."""
    if since is None:
        return "-"
    seconds = max(0, int(((now or datetime.now(UTC)) - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _job_json(job: TrainHubJob) -> dict[str, Any]:
    return job.model_dump(mode="json", exclude={"sequence"})


# -- get clusters ---------------------------------------------------------------------------


def _amount(snapshot: ClusterSnapshot, resource: str) -> dict[str, str]:
    return {
        "free": format_quantity(snapshot.free(resource)),
        "allocatable": format_quantity(snapshot.total(resource)),
    }


def cluster_row(snapshot: ClusterSnapshot, max_age: float) -> dict[str, Any]:
    """A cluster as `get clusters -o json` prints it."""
    age = snapshot.age_seconds()
    resources = sorted({r for n in snapshot.nodes for r in n.allocatable})
    return {
        "name": snapshot.name,
        "healthy": snapshot.healthy and age <= max_age,
        "reportsHealthy": snapshot.healthy,
        "unhealthyReason": snapshot.unhealthyReason,
        "heartbeatAgeSeconds": round(age, 1),
        "nodes": len(snapshot.nodes),
        "backend": snapshot.backend,
        "labels": snapshot.labels,
        "namespaces": snapshot.namespaces,
        "jobs": len(snapshot.jobs),
        "resources": {r: _amount(snapshot, r) for r in resources},
    }


def format_cpu(value: Decimal) -> str:
    return format(value.quantize(Decimal("0.1")).normalize(), "f")


def format_gib(value: Decimal) -> str:
    return f"{(value / _GIB).quantize(Decimal('0.1'))}Gi"


def resource_share(snapshot: ClusterSnapshot, resource: str, show: Callable[[Decimal], str]) -> str:
    """`free/total` of a resource, `-` when the cluster has none."""
    total = snapshot.total(resource)
    if not total:
        return "-"
    return f"{show(snapshot.free(resource))}/{show(total)}"


@get_app.command(
    "clusters",
    epilog=examples("trainhub get clusters", "trainhub get clusters -o wide"),
)
@with_settings(*READ_BUS, "max_heartbeat_age")
def get_clusters(
    settings: TrainhubSettings,
    output: Annotated[ListOutput, typer.Option("-o", "--output")] = ListOutput.text,
) -> None:
    """List member clusters from their heartbeats: health, heartbeat age, nodes, and free
    and allocatable cpu, memory and GPUs (`-o wide` adds backend, labels and job count).

    A cluster whose last heartbeat is older than --max-heartbeat-age is shown unhealthy."""

    max_age = settings.max_heartbeat_age

    async def work(client: AsyncTrainHubClient) -> list[ClusterSnapshot]:
        return await client.list_clusters(window=max_age)

    clusters = _with_client(settings, work)
    if output in (ListOutput.json, ListOutput.yaml):
        print_structured([cluster_row(c, max_age) for c in clusters], output.value)
        return
    if not clusters:
        err_console.print("No clusters found.")
        return
    wide = output == ListOutput.wide
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["NAME", "HEALTHY", "HEARTBEAT", "NODES", "CPU", "MEMORY", "GPU"]
    if wide:
        columns += ["BACKEND", "JOBS", "LABELS"]
    for column in columns:
        table.add_column(column, overflow="fold")
    for snapshot in clusters:
        row = cluster_row(snapshot, max_age)
        healthy = "yes" if row["healthy"] else ("stale" if snapshot.healthy else "no")
        cells = [
            snapshot.name,
            healthy,
            f"{row['heartbeatAgeSeconds']:.0f}s ago",
            str(row["nodes"]),
            resource_share(snapshot, "cpu", format_cpu),
            resource_share(snapshot, "memory", format_gib),
            resource_share(snapshot, GPU, format_cpu),
        ]
        if wide:
            labels = ",".join(f"{k}={v}" for k, v in sorted(snapshot.labels.items()))
            cells += [snapshot.backend or "-", str(row["jobs"]), labels or "-"]
        table.add_row(*cells)
    console.print(table)


# -- describe job ---------------------------------------------------------------------------


def _parsed(job: TrainHubJob) -> AnyJob | None:
    if job.spec is None:
        return None
    try:
        return parse_placed_job(job.spec, job.runtime)
    except ContractError:
        return None


def _replica_table(parsed: AnyJob) -> Table:
    table = Table(title="replicas", title_justify="left", header_style="bold")
    for column in ("type", "replicas", "restart", "image", "command", "requests"):
        table.add_column(column, overflow="fold")
    adapter = adapter_for(parsed.kind)
    for rtype, rspec in parsed.replica_specs.items():
        containers = rspec.template.spec.containers
        name = adapter.main_container(parsed, rtype)
        main = next((c for c in containers if c.name == name), None)
        command = " ".join([*(main.command or []), *(main.args or [])]) if main else ""
        command = "; ".join(line.strip() for line in command.splitlines())
        if len(command) > 60:
            command = command[:57] + "..."
        requests = main.effective_requests() if main else {}
        table.add_row(
            rtype,
            str(parsed.replicas_of(rtype)),
            adapter.restart_policy(parsed, rtype),  # the kind's default when unset
            main.image if main else "-",
            command or "-",
            ", ".join(f"{k}={format_quantity(v)}" for k, v in sorted(requests.items())) or "-",
        )
    return table


def _conditions_table(job: TrainHubJob) -> Table:
    table = Table(title="conditions", title_justify="left", header_style="bold")
    for column in ("type", "status", "reason", "last transition", "message"):
        table.add_column(column, overflow="fold")
    for condition in job.conditions:
        when = condition.lastTransitionTime
        table.add_row(
            condition.type,
            condition.status,
            condition.reason or "",
            when.strftime("%Y-%m-%d %H:%M:%S") if when else "",
            condition.message or "",
        )
    return table


def _events_table(job: TrainHubJob) -> Table:
    table = Table(title="events", title_justify="left", header_style="bold")
    for column in ("age", "phase", "reason", "from", "message"):
        table.add_column(column, overflow="fold")
    for event in job.events:
        table.add_row(
            format_age(event.time),
            event.phase.value,
            event.reason or "",
            event.source.removeprefix("trainhub/"),
            event.message or "",
        )
    return table


def _priority_text(job: TrainHubJob) -> str:
    """The class and the number the hub resolved it to (placement.priority_classes)."""
    if job.phase is None:
        return job.priority_class or "-"
    if job.priority is None:
        return f"{job.priority_class or '-'} (not a class the hub knows)"
    if job.priority_class is None:
        return f"{job.priority} (no priorityClass: the default)"
    return f"{job.priority} (priorityClass {job.priority_class})"


def describe_text(job: TrainHubJob) -> None:
    parsed = _parsed(job)
    phase = job.phase.value if job.phase else "Submitted"
    fields = [
        ("Name", job.key),
        ("UID", job.uid),
        ("Kind", f"{job.kind or '-'} ({job.framework or '-'})"),
        ("Queue", job.queue or "default"),
        ("Priority", _priority_text(job)),
        ("Phase", phase + (f" ({job.reason})" if job.reason and job.reason != phase else "")),
        ("Message", job.message or ""),
        ("Cluster", f"{job.cluster} (attempt {job.attempt})" if job.cluster else "-"),
        ("Created", job.created.isoformat() if job.created else "-"),
        ("Updated", job.updated.isoformat() if job.updated else "-"),
    ]
    if parsed is not None:
        function = (parsed.metadata.annotations or {}).get(FUNCTION_ANNOTATION)
        if function:
            fields.append(("Function", function))
        if isinstance(parsed, TrainJob):
            ref, resolved = parsed.spec.runtimeRef, parsed.resolved
            fields.append(
                (
                    "Runtime",
                    f"{ref.kind or 'ClusterTrainingRuntime'} {ref.name} ({resolved.policy}), "
                    f"numNodes={resolved.num_nodes}",
                )
            )
            fields.append(
                ("Spec", f"suspend={parsed.spec.suspend}, managedBy={parsed.spec.managedBy}")
            )
        else:
            policy = parsed.run_policy.model_dump(exclude_none=True)
            fields.append(("Run policy", ", ".join(f"{k}={v}" for k, v in policy.items()) or "-"))
    width = max(len(k) for k, _ in fields) + 1
    for key, value in fields:
        console.print(f"{key + ':':<{width}} {value}", highlight=False)
    if parsed is not None:
        console.print(_replica_table(parsed))
    if job.placement is not None:
        console.print(decision_table(job.placement, "placement"))
    if job.status.replicaStatuses:
        table = Table(title="replica statuses", title_justify="left", header_style="bold")
        for column in ("type", "active", "succeeded", "failed"):
            table.add_column(column)
        for rtype, counts in job.status.replicaStatuses.items():
            table.add_row(rtype, str(counts.active), str(counts.succeeded), str(counts.failed))
        console.print(table)
    if job.status.jobsStatus:
        table = Table(title="jobs status", title_justify="left", header_style="bold")
        columns = ("name", "ready", "succeeded", "failed", "active", "suspended")
        for column in columns:
            table.add_column(column)
        for entry in job.status.jobsStatus:
            table.add_row(*(str(getattr(entry, column)) for column in columns))
        console.print(table)
    if job.conditions:
        console.print(_conditions_table(job))
    if job.events:
        console.print(_events_table(job))


@describe_app.command(
    "job",
    epilog=examples(
        "trainhub describe job team-a/mnist",
        "trainhub describe job mnist -n team-a -o yaml",
    ),
)
@with_settings(*READ_BUS)
def describe_job(
    settings: TrainhubSettings,
    job: Annotated[str, typer.Argument(help="NAME, NAMESPACE/NAME or uid.")],
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of a bare NAME.")
    ] = "default",
    output: Annotated[DetailOutput, typer.Option("-o", "--output")] = DetailOutput.text,
) -> None:
    """A job's spec summary, where it was placed and why (every cluster's score or reason),
    its conditions and its recent status events."""

    async def work(client: AsyncTrainHubClient) -> TrainHubJob:
        return await client.get_job(job, namespace)

    found = _with_client(settings, work)
    if output != DetailOutput.text:
        print_structured(_job_json(found), output.value)
        return
    describe_text(found)


# -- logs -----------------------------------------------------------------------------------


class LinePrefixer:
    """Prefixes every line with its pod's name; a line split over chunks is kept whole."""

    def __init__(self) -> None:
        self._partial: dict[str, str] = {}

    def feed(self, pod: str, text: str) -> str:
        lines = (self._partial.pop(pod, "") + text).split("\n")
        if lines[-1]:
            self._partial[pod] = lines[-1]
        return "".join(f"[{pod}] {line}\n" for line in lines[:-1])

    def flush(self) -> str:
        rest = "".join(f"[{pod}] {line}\n" for pod, line in self._partial.items())
        self._partial.clear()
        return rest


@with_settings(*READ_BUS)
def update(
    settings: TrainhubSettings,
    job_file: Annotated[Path, typer.Argument(help="The job's new YAML/JSON document.")],
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="The job's namespace, if the file names none."),
    ] = None,
) -> None:
    """Replace a job's spec with the file's (the job named in it), as a PATCH would.

    The spec may change while the job has no pods: queued, held, or suspended (it is then
    placed again with the new spec on resume). A job whose pods exist may only be suspended
    (runPolicy.suspend: true); an explicit runPolicy.suspend holds or resumes the job.

    Exit codes: 0 sent; 1 the update cannot apply (or the file is invalid); 2 connection
    error; 3 no such job."""

    async def work(client: AsyncTrainHubClient) -> str:
        return await client.update_job(job_file, namespace=namespace)

    try:
        uid = _with_client(settings, work)
    except ValueError as exc:  # JobUpdateError, or an invalid file (named in the message)
        raise _fail(str(exc), EXIT_FAILED) from None
    console.print(f"update sent for {job_file} (uid {uid})", highlight=False)


@with_settings(*READ_BUS)
def logs(
    settings: TrainhubSettings,
    job: Annotated[str, typer.Argument(help="NAME, NAMESPACE/NAME or uid.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the job finishes.")
    ] = False,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of a bare NAME.")
    ] = "default",
    pod: Annotated[str | None, typer.Option(help="Only this pod (default: every pod).")] = None,
    tail: Annotated[
        int | None, typer.Option(help="Only the last N lines of each pod so far.", min=0)
    ] = None,
    prefix: Annotated[
        bool | None,
        typer.Option(
            "--prefix/--no-prefix", help="Start lines with \\[pod] (default: when several pods)."
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="With -f: stop following after this many seconds.")
    ] = 3600,
) -> None:
    """Print a job's pod logs, fetched by the worker of whichever cluster runs it.

    Exit codes: 0 printed; 1 the job runs nowhere yet (or is suspended) or its worker did
    not answer; 2 connection error; 3 no such job."""

    async def work(client: AsyncTrainHubClient) -> None:
        found = await client.get_job(job, namespace)
        parsed = _parsed(found)
        several = pod is None and (parsed is None or parsed.total_replicas > 1)
        prefixer = LinePrefixer() if (several if prefix is None else prefix) else None
        async for chunk in client.stream_job_logs(
            found.uid, follow=follow, pod=pod, tail_lines=tail, timeout=timeout
        ):
            assert chunk.pod is not None
            text = chunk.text if prefixer is None else prefixer.feed(chunk.pod, chunk.text)
            sys.stdout.write(text)
            sys.stdout.flush()
        if prefixer is not None:
            sys.stdout.write(prefixer.flush())

    _with_client(settings, work)
