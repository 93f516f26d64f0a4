"""`trainhub up`: the hub and the clusters' workers in one process (the embedded runner), on
an in-memory bus or on Kafka, with the jobs given followed to their end."""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from prometheus_client import start_http_server
from rich.text import Text

from schemas.errors import ContractError
from schemas.events import JobStatusUpdate
from schemas.job_parsing import job_uid_of, names_of
from schemas.status import JobPhase
from trainhub.bus_factory import make_bus
from trainhub.cli_help import examples
from trainhub.cli_live import LiveState, LiveView, want_live
from trainhub.cli_output import console, fail
from trainhub.cli_settings import with_settings
from trainhub.cli_submit import (
    LIVE_HELP,
    all_succeeded,
    follow_until_finished,
    job_documents,
    managers,
    unsuccessful,
)
from trainhub.console_view import StatusPrinter
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.logs import quiet_echoes
from trainhub.processes import check_metrics_port
from trainhub.producer import follow_submissions, submit_with_id
from trainhub.settings import TrainhubSettings
from workers.backends.base import Backend
from workers.backends.registry import BACKENDS, declared_capacity_names, spoken
from workers.cluster_spec import parse_cluster_spec

DEFAULT_CLUSTERS = ["east:cpu=4,memory=8Gi", "west:cpu=8,memory=16Gi"]
_BACKEND_HELP = (
    spoken(
        f"{name} ({BACKENDS[name].note})" if BACKENDS[name].note else name
        for name in declared_capacity_names()
    )
    + "."
)


def register(app: typer.Typer) -> None:
    """Add `up` to the `trainhub` command."""
    app.command(
        epilog=examples(
            "trainhub up --exit-on-finish examples/jax-mnist-spmd/jaxjob.yaml",
            "trainhub up --backend sim --cluster a:cpu=4,memory=8Gi,gpu=2 job.yaml",
            "trainhub up --no-live --logs-dir logs job.yaml",
        )
    )(up)


@with_settings(*TrainhubSettings.model_fields)
def up(
    settings: TrainhubSettings,
    job_files: Annotated[list[Path] | None, typer.Argument(help="Jobs to submit.")] = None,
    cluster: Annotated[
        list[str] | None,
        typer.Option(
            "--cluster",
            help="NAME:cpu=8,memory=16Gi[,nodes=N,gpu=G] (repeatable; NAME alone: cpu=4, "
            "memory=8Gi).",
        ),
    ] = None,
    backend: Annotated[str, typer.Option(help=_BACKEND_HELP)] = "local",
    exit_on_finish: Annotated[
        bool, typer.Option(help="Exit when every job finished: 0 only if all Succeeded.")
    ] = False,
    logs_dir: Annotated[Path | None, typer.Option(help="Keep pod logs here.")] = None,
    live: Annotated[bool | None, typer.Option("--live/--no-live", help=LIVE_HELP)] = None,
    sandbox: Annotated[
        bool,
        typer.Option(
            "--sandbox",
            help="One kube worker per member cluster of the running sandbox (`trainhub "
            "sandbox up --clusters N`), as its least-privilege identity, on its broker.",
        ),
    ] = False,
) -> None:
    """Run the hub and the clusters' workers in one process, on an in-memory bus (or on
    Kafka with --bootstrap; with --sandbox, on the sandbox's clusters and broker).

    On a terminal a live view shows the jobs, the clusters' free capacity and the progress;
    piped, every status change is one line. The hub's placement settings (`placement:` in
    --config) apply."""
    backends: dict[str, Backend] | None = None
    namespaces: dict[str, list[str]] | None = None
    if sandbox:
        from trainhub.cli import _sandbox_workers  # the sandbox's part of the command

        if cluster:
            raise fail("--sandbox runs the sandbox's clusters: leave out --cluster", code=2)
        settings, backends, namespaces = _sandbox_workers(settings)
        backend = "kube"
    try:  # flag mistakes: usage errors, exit 2 as typer's own
        specs = [] if sandbox else [parse_cluster_spec(c) for c in (cluster or DEFAULT_CLUSTERS)]
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"--cluster names must differ (got {', '.join(names)})")
        if backend not in declared_capacity_names() and not sandbox:
            raise ValueError(
                f"trainhub up runs {spoken(declared_capacity_names())} clusters, not "
                f"{backend!r}; for Kubernetes clusters use --sandbox (the sandbox's), or run "
                "`trainhub hub` and one `trainhub worker --backend kube` per cluster"
            )
        if exit_on_finish and not job_files:
            raise ValueError("--exit-on-finish waits for the jobs given: name at least one file")
        if settings.gang_scheduler is not None and not sandbox:
            raise ValueError("--gang-scheduler needs real clusters: use --sandbox")
        if settings.mode == "delegate" and not sandbox:
            raise ValueError("--mode delegate needs real clusters: use --sandbox")
        check_metrics_port(settings)
    except ValueError as exc:
        raise fail(str(exc), code=2) from None
    try:
        documents = [d for f in job_files or [] for d in job_documents(f)]  # none empty
        _check_identities(documents)
    except (ContractError, ValueError) as exc:
        raise fail(str(exc)) from None
    for warning in managers(documents, settings.default_managed_by):
        console.print(f"warning: {warning}", style="yellow", highlight=False)
    try:
        settings.hub_config()
    except ValueError as exc:
        raise fail(f"invalid settings: {exc}", code=2) from None
    heartbeat = (
        settings.heartbeat_interval if "heartbeat_interval" in settings.model_fields_set else 1.0
    )
    options = EmbeddedOptions(
        clusters=specs,
        backend=backend,
        heartbeat_interval=heartbeat,
        max_heartbeat_age=settings.max_heartbeat_age,
        settings=settings,
        logs_dir=logs_dir,
    )
    try:
        code = asyncio.run(
            _run_up(
                options, settings, documents, exit_on_finish, want_live(live), backends, namespaces
            )
        )
    except asyncio.CancelledError:  # SIGTERM: stopped as on Ctrl-C, the pods with it
        code = 128 + signal.SIGTERM
    raise typer.Exit(code)


def _check_identities(documents: list[dict[str, Any]]) -> None:
    """Every job given to `up` names itself, once: the hub knows a job by its identity, so a
    nameless one cannot be followed and a second copy would only be refused."""
    seen: dict[str, str] = {}
    for document in documents:
        uid = job_uid_of(document)
        names = names_of(document)
        shown = f"{names.get('namespace', 'default')}/{names.get('name', '?')}"
        if uid is None:
            kind = names.get("kind", "job")
            raise ContractError(f"a {kind} document has no valid metadata.name to identify it")
        if uid in seen:
            raise ContractError(f"job {shown} appears twice in the files: give each job once")
        seen[uid] = shown


async def _run_up(
    options: EmbeddedOptions,
    settings: TrainhubSettings,
    documents: list[dict[str, Any]],
    exit_on_finish: bool,
    live: bool,
    backends: dict[str, Backend] | None = None,
    namespaces: dict[str, list[str]] | None = None,
) -> int:
    # SIGTERM stops it as Ctrl-C does: the main task is cancelled, and leaving `Embedded`
    # stops the workers, whose local pods (processes) go with them.
    main = asyncio.current_task()
    assert main is not None

    def stop() -> None:
        # Once: a second SIGTERM (`timeout` sends one to the process and one to its group)
        # must not cut short the stop the first began.
        if not main.cancelling():
            main.cancel()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop)
    bus = make_bus(settings, allow_memory=True)
    topics = settings.topics()
    async with Embedded(
        options, bus=bus, topics=topics, backends=backends, namespaces=namespaces
    ) as system:
        if settings.metrics_port is not None:
            server, _ = start_http_server(settings.metrics_port, registry=system.registry)
            # The port bound, which `--metrics-port 0` leaves to the system.
            console.print(f"metrics on http://127.0.0.1:{server.server_port}/metrics")
        quiet_echoes(system.topics.jobs)
        names = ", ".join(w.cluster for w in system.workers)
        count = len(system.workers)
        bus_name = (
            f"Kafka at {settings.bootstrap}, topics {system.topics.prefix}.*"
            if settings.bootstrap
            else "in-memory bus"
        )
        headline = (
            f"trainhub up: hub + {count} clusters ({names}), {options.backend} backend, {bus_name}"
        )
        # On a broker with history, the submission ids pick out this call's runs: a job that
        # exists already is refused, and its old run is not this one's outcome.
        since = int(time.time() * 1000) - 60_000
        submissions: dict[str, str] = {}
        names_by_uid: dict[str, str] = {}
        for document in documents:
            uid, submissions[uid] = await submit_with_id(system.bus, system.topics, document)
            said = names_of(document)
            names_by_uid[uid] = f"{said.get('namespace', 'default')}/{said.get('name', uid)}"
        uids = list(submissions)
        final: dict[str, JobStatusUpdate] = {}
        # On the in-memory bus nothing else can resume a job held suspended: it is final.
        held = not settings.bootstrap
        ours = follow_submissions(system.bus, system.topics, submissions, from_time_ms=since)
        if live:
            state = LiveState(title=headline, max_heartbeat_age=options.max_heartbeat_age)
            for uid, document in zip(uids, documents, strict=True):
                state.expect(uid, document, datetime.now(UTC))
            async with LiveView(console, state, system.bus, system.topics) as view:
                if not exit_on_finish:
                    async for update in system.updates():
                        view.status(update)
                    return 0
                await follow_until_finished(ours, len(uids), final, view.status, held)
        else:
            console.print(headline)
            printer = StatusPrinter(console)
            if not exit_on_finish:
                async for update in system.updates():
                    printer(update)
                return 0
            await follow_until_finished(ours, len(uids), final, printer, held)
        for update in final.values():
            for pod, text in (await system.pod_logs(update)).items():
                tail = text.strip().splitlines()[-3:]
                for line in tail:
                    console.print(Text.assemble(("  " + pod, "dim"), " | ", line), highlight=False)
        ok = all_succeeded(final)
        for line in unsuccessful(final, names_by_uid):
            console.print(line, highlight=False)
        if held and any(u.phase == JobPhase.SUSPENDED for u in final.values()):
            console.print(
                "a job held suspended (runPolicy.suspend, a TrainJob's spec.suspend) never "
                "runs here: nothing can resume "
                "it on this in-memory bus (run on Kafka with --bootstrap and `trainhub resume`)"
            )
        console.print(
            Text("all jobs succeeded", style="bold green")
            if ok
            else Text("some jobs did not succeed", style="bold red")
        )
        return 0 if ok else 1
