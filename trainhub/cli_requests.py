"""`trainhub status`, `delete`, `suspend` and `resume`: read one job's latest status, or ask
the hub to act on the job, over the bus."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from schemas.errors import ContractError
from schemas.events import EventType, JobStatusUpdate
from schemas.job_parsing import load_documents, names_of, read_text
from schemas.kubeflow import derive_job_uid
from schemas.status import JobPhase
from trainhub.bus_factory import make_bus
from trainhub.cli_help import examples
from trainhub.cli_jobs import print_structured
from trainhub.cli_output import Output, console, fail, require_bootstrap
from trainhub.cli_settings import READ_BUS, with_settings
from trainhub.console_view import StatusPrinter
from trainhub.producer import latest_status, request
from trainhub.sdk_errors import looked_for
from trainhub.settings import TrainhubSettings

_REQUESTS = (
    ("delete", EventType.JOB_DELETED, "Delete a job: its pods go wherever they run."),
    (
        "suspend",
        EventType.JOB_SUSPENDED,
        "Suspend a job: its pods and services are deleted until it is resumed.",
    ),
    ("resume", EventType.JOB_RESUMED, "Resume a suspended job."),
)


def register(app: typer.Typer) -> None:
    """Add `status`, `delete`, `suspend` and `resume` to the `trainhub` command."""
    app.command(
        epilog=examples(
            "trainhub status default/jax-mnist",
            "trainhub status jax-mnist -o json --bootstrap localhost:9092",
        )
    )(status)
    for verb, event_type, summary in _REQUESTS:
        app.command(
            verb,
            epilog=examples(
                f"trainhub {verb} default/jax-mnist",
                f"trainhub {verb} -f examples/jax-mnist-spmd/jaxjob.yaml",
                f"trainhub {verb} jax-mnist --bootstrap localhost:9092 --topic-prefix demo",
            ),
        )(job_request_command(verb, event_type, summary))


@with_settings(*READ_BUS)
def status(
    settings: TrainhubSettings,
    job: Annotated[
        str, typer.Argument(help="Job uid, NAMESPACE/NAME, or NAME (namespace default).")
    ],
    output: Annotated[Output, typer.Option("-o", "--output")] = Output.text,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of a bare NAME.")
    ] = "default",
) -> None:
    """Show a job's latest status as the status topic has it."""
    require_bootstrap(settings)
    qualified_name = qualified(job, namespace)
    found = asyncio.run(_latest_status(settings, qualified_name))
    if found is None:
        # `qualified` leaves a NAME bare only in the default namespace.
        searched = looked_for(qualified_name, "default")
        raise fail(f"no status for job {searched} on the status topic", code=3)
    update, published = found
    if output != Output.text:
        document = update.model_dump(mode="json", exclude={"job"})
        document["published"] = published.isoformat()
        print_structured(document, output.value)
        return
    StatusPrinter(console)(update, at=published)
    if update.status is not None:
        for condition in update.status.conditions:
            console.print(
                f"  {condition.type}={condition.status} {condition.reason or ''}", highlight=False
            )


def job_request_command(verb: str, event_type: str, summary: str) -> Callable[..., None]:
    """The command that asks the hub for `event_type` on the jobs it is given: by name, or
    every job a file names (`-f FILE`, `-` for stdin, as `kubectl delete -f`)."""

    def command(
        settings: TrainhubSettings,
        jobs: Annotated[
            list[str] | None,
            typer.Argument(help="Job uid, NAMESPACE/NAME, or NAME.", metavar="[JOB]..."),
        ] = None,
        namespace: Annotated[
            str, typer.Option("--namespace", "-n", help="Namespace of a bare NAME.")
        ] = "default",
        filename: Annotated[
            list[str] | None,
            typer.Option(
                "--filename",
                "-f",
                help="The jobs this YAML/JSON file names (- for stdin); may be repeated.",
            ),
        ] = None,
    ) -> None:
        named = [qualified(job, namespace) for job in jobs or []]
        for source in filename or []:
            named += _jobs_in_file(source, namespace)
        if not named:
            raise fail(f"name the jobs to {verb}: JOB arguments or -f FILE", code=2)
        missing = 0
        for job in named:
            try:
                _job_request(settings, job, event_type, verb)
            except typer.Exit as exit_:
                if exit_.exit_code != 3 or len(named) == 1:
                    raise
                missing += 1
        if missing:
            raise typer.Exit(3)

    command.__name__ = command.__qualname__ = verb
    command.__doc__ = summary
    return with_settings(*READ_BUS)(command)


def _jobs_in_file(source: str, namespace: str) -> list[str]:
    """NAMESPACE/NAME of each document of a job file; its namespace, else `-n`'s."""
    try:
        text = sys.stdin.read() if source == "-" else read_text(Path(source))
        documents = load_documents(text, "<stdin>" if source == "-" else source)
    except ContractError as exc:
        raise fail(str(exc), code=2) from None
    named: list[str] = []
    for index, document in enumerate(documents, start=1):
        names = names_of(document)
        if "name" not in names:
            raise fail(f"{source}, document {index}: no metadata.name to say which job", code=2)
        metadata = document.get("metadata") or {}  # a mapping: names_of found a name in it
        named.append(f"{metadata.get('namespace') or namespace}/{names['name']}")
    return named


def _job_request(settings: TrainhubSettings, job: str, event_type: str, verb: str) -> None:
    require_bootstrap(settings)
    found = asyncio.run(_resolve_and_request(settings, job, event_type))
    if found is None:
        raise fail(f"no job {looked_for(job, 'default')} known on the status topic", code=3)
    uid, sent, phase = found
    if not sent:
        console.print(
            f"nothing to do: {job} (uid {uid}) is {phase.value}; no {verb} requested",
            highlight=False,
        )
        return
    console.print(f"{verb} requested for {job} (uid {uid})", highlight=False)


async def _resolve_and_request(
    settings: TrainhubSettings, job: str, event_type: str
) -> tuple[str, bool, JobPhase] | None:
    """The job's uid, whether the request was sent, and the phase it was judged on: a
    finished job is neither suspended nor resumed, a deleted one not deleted again (a phase
    that may still change is no reason to hold a request back: the status may lag)."""
    bus = make_bus(settings)
    await bus.start()
    try:
        topics = settings.topics()
        latest = await latest_status(bus, topics, candidate_uids(job))
        if latest is None:
            return None
        update = latest[0]
        pointless = (
            update.phase == JobPhase.DELETED
            if event_type == EventType.JOB_DELETED
            else update.phase.finished
        )
        if not pointless:
            await request(bus, topics, event_type, update.uid)
        return update.uid, not pointless, update.phase
    finally:
        await bus.close()


def qualified(job: str, namespace: str) -> str:
    """NAME in `namespace` (`-n`); a uid or NAMESPACE/NAME stays as given."""
    return job if "/" in job or namespace == "default" else f"{namespace}/{job}"


def candidate_uids(job: str) -> set[str]:
    """A uid as given, or the uid NAMESPACE/NAME derives (namespace default)."""
    namespace, _, name = job.rpartition("/")
    return {job, name, derive_job_uid(namespace or "default", name)}


async def _latest_status(
    settings: TrainhubSettings, job: str
) -> tuple[JobStatusUpdate, datetime] | None:
    bus = make_bus(settings)
    await bus.start()
    try:
        return await latest_status(bus, settings.topics(), candidate_uids(job))
    finally:
        await bus.close()
