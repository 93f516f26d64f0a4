"""`trainhub`: run, render, plan, submit and follow training jobs."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from prometheus_client import start_http_server
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from bus.base import BusError
from dispatcher.placement_config import PlacementConfig
from schemas.cluster import ClusterPolicy, ClustersFile, ClusterSnapshot
from schemas.errors import ContractError, describe_validation_error
from schemas.events import EventType, JobStatusUpdate
from schemas.job_parsing import (
    job_uid_of,
    load_documents,
    names_of,
    read_text,
)
from schemas.kubeflow import derive_job_uid
from schemas.names import DNS1123_LABEL, label_problem
from schemas.status import ALREADY_EXISTS, JobPhase
from trainhub import member_rbac
from trainhub.bus_factory import make_bus
from trainhub.cli_help import examples, tidy_help
from trainhub.cli_jobs import print_structured
from trainhub.cli_jobs import register as register_job_commands
from trainhub.cli_live import LiveState, LiveView, want_live
from trainhub.cli_plan import PlannedJob, plan_jobs
from trainhub.cli_settings import with_settings
from trainhub.console_view import StatusPrinter, decision_table, error_text
from trainhub.embedded import Embedded, EmbeddedOptions, make_worker_backend
from trainhub.job_checks import JobFiles, read_job_files
from trainhub.logs import quiet_echoes, setup_logging
from trainhub.processes import ServiceCrashed, check_metrics_port, run_hub, run_worker
from trainhub.producer import (
    ClusterStillReporting,
    follow_submissions,
    latest_status,
    request,
    retire_cluster,
    submit_with_id,
)
from trainhub.sdk import looked_for
from trainhub.settings import TrainhubSettings
from workers.backends.base import Backend
from workers.cluster_spec import check_cluster_name, parse_cluster_spec
from workers.rendering import render_job

app = typer.Typer(
    help="trainhub: dispatch Kubeflow training jobs across Kubernetes clusters over an event bus.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    epilog=examples(
        "trainhub up --exit-on-finish examples/jax-mnist-spmd/jaxjob.yaml",
        "trainhub submit examples/jax-mnist-spmd/jaxjob.yaml --watch",
        "trainhub get jobs -o wide",
        "trainhub COMMAND --help",
    ),
)
# No markup: job names, pod output and messages are the users' text, and brackets in them
# must print as written (styles are given as Text).
console = Console(soft_wrap=True, markup=False)
err_console = Console(stderr=True, soft_wrap=True, markup=False)

DEFAULT_CLUSTERS = ["east:cpu=4,memory=8Gi", "west:cpu=8,memory=16Gi"]


class Output(StrEnum):
    text = "text"
    json = "json"
    yaml = "yaml"


class ManifestFormat(StrEnum):
    """How `render` writes Kubernetes objects: as documents, no table."""

    yaml = "yaml"
    json = "json"


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(error_text(message), highlight=False)
    return typer.Exit(code)


@app.callback()
def _root(
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose",
            "-v",
            count=True,
            metavar="",
            help="More logs: -v info (start-up and stop lines, placements), -vv debug.",
        ),
    ] = 0,
) -> None:
    setup_logging(logging.WARNING - 10 * verbose)


@app.command(
    epilog=examples(
        "trainhub render examples/jax-mnist-spmd/jaxjob.yaml",
        "trainhub render job.yaml -o json",
    )
)
def render(
    job_file: Annotated[Path, typer.Argument(help="Job YAML/JSON (kubeflow.org/v1).")],
    output: Annotated[ManifestFormat, typer.Option("-o", "--output")] = ManifestFormat.yaml,
) -> None:
    """Print the Kubernetes objects a worker would create for the jobs (no cluster needed).

    Every valid job of the file is rendered; each document the hub would reject is named on
    stderr with the reason, and then the exit code is 1."""
    found = read_job_files([job_file])
    objects: list[dict[str, Any]] = []
    for job in found.jobs:
        try:
            objects.extend(render_job(job).manifests())
        except ContractError as exc:
            found.problems.append(f"{job.kind} {job.key}: {exc}")
    if objects:  # every job has pods: none rendered, nothing to print
        print_structured(objects, output.value)
    _exit_on_problems(found)


def _exit_on_problems(found: JobFiles) -> None:
    """Name every bad document on stderr, then exit 1; return when there is none."""
    for problem in found.problems:
        err_console.print(error_text(problem), highlight=False)
    if found.problems:
        raise typer.Exit(1)


@app.command(
    epilog=examples(
        "trainhub plan job.yaml --clusters clusters.yaml",
        "trainhub plan a.yaml b.yaml --clusters clusters.yaml --config hub.yaml -o json",
    )
)
@with_settings
def plan(
    settings: TrainhubSettings,
    job_files: Annotated[list[Path], typer.Argument(help="Job YAML/JSON files.")],
    clusters: Annotated[
        Path, typer.Option("--clusters", help="YAML {clusters: [ClusterSnapshot]}")
    ],
    output: Annotated[Output, typer.Option("-o", "--output")] = Output.text,
) -> None:
    """Show where jobs would be placed, with every cluster's score or rejection reason.

    The placement settings are the hub's: the `placement:` mapping of the --config file (or
    TRAINHUB_PLACEMENT as JSON) sets scoring weights, GPU label, priority classes and queue
    limits; a cluster's namespaces and pod policy come from the clusters file. Several jobs
    are planned in the order the hub would offer them, each taking the capacity it got."""
    try:
        placement = PlacementConfig.from_dict(settings.placement)
    except ValueError as exc:
        raise fail(f"invalid settings: {exc}", code=2) from None
    found = read_job_files(job_files)
    try:
        documents = load_documents(read_text(clusters), str(clusters))
        if (
            len(documents) != 1
            or not isinstance(documents[0], dict)
            or "clusters" not in documents[0]
        ):
            raise ContractError(
                f"{clusters}: expected one mapping with a `clusters` list "
                "({clusters: [{name: ..., nodes: [...]}, ...]})"
            )
        snapshots = ClustersFile.model_validate(documents[0]).clusters
    except ValidationError as exc:
        raise fail(f"{clusters}: {describe_validation_error(exc)}") from None
    except ContractError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"{clusters}: {exc.strerror}") from None
    except ValueError as exc:
        raise fail(f"{clusters}: {exc}") from None
    planned = plan_jobs(
        found.jobs, snapshots, placement, max_heartbeat_age=settings.max_heartbeat_age
    )
    _show_plan(planned, placement, output)
    _exit_on_problems(found)


def _show_plan(planned: list[PlannedJob], placement: PlacementConfig, output: Output) -> None:
    if not planned:
        return
    if output != Output.text:
        payload: Any = [p.as_json() for p in planned]
        payload = payload[0] if len(payload) == 1 else payload
        if output == Output.json:
            sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        else:
            sys.stdout.write(yaml.safe_dump(payload, sort_keys=False))
        return
    weights = ", ".join(f"{name}={weight:g}" for name, weight in placement.scoring.items())
    console.print(f"scoring: {weights}", highlight=False)
    for item in planned:
        title = f"placement of {item.job.key}"
        if item.queue:  # offered to placement (not another manager's, nor held suspended)
            title += f" (priority {item.priority}, queue {item.queue})"
        if item.placement is None:
            console.print(f"{title}: held back, {item.held}", highlight=False)
            continue
        decision = item.placement.decision
        console.print(decision_table(decision, title))
        console.print(
            f"chosen: {decision.chosen or 'none (the job would wait or be rejected)'}",
            highlight=False,
        )


_LIVE_HELP = "A live table of jobs and clusters (default: when stdout is a terminal)."


@app.command(
    epilog=examples(
        "trainhub up --exit-on-finish examples/jax-mnist-spmd/jaxjob.yaml",
        "trainhub up --backend sim --cluster a:cpu=4,memory=8Gi,gpu=2 job.yaml",
        "trainhub up --no-live --logs-dir logs job.yaml",
    )
)
@with_settings
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
    backend: Annotated[str, typer.Option(help="local (real processes) or sim.")] = "local",
    exit_on_finish: Annotated[
        bool, typer.Option(help="Exit when every job finished: 0 only if all Succeeded.")
    ] = False,
    logs_dir: Annotated[Path | None, typer.Option(help="Keep pod logs here.")] = None,
    live: Annotated[bool | None, typer.Option("--live/--no-live", help=_LIVE_HELP)] = None,
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
        if cluster:
            raise fail("--sandbox runs the sandbox's clusters: leave out --cluster", code=2)
        settings, backends, namespaces = _sandbox_workers(settings)
        backend = "kube"
    try:  # flag mistakes: usage errors, exit 2 as typer's own
        specs = [] if sandbox else [parse_cluster_spec(c) for c in (cluster or DEFAULT_CLUSTERS)]
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"--cluster names must differ (got {', '.join(names)})")
        if backend not in ("local", "sim") and not sandbox:
            raise ValueError(
                f"trainhub up runs local or sim clusters, not {backend!r}; for Kubernetes "
                "clusters use --sandbox (the sandbox's), or run `trainhub hub` and one "
                "`trainhub worker --backend kube` per cluster"
            )
        if exit_on_finish and not job_files:
            raise ValueError("--exit-on-finish waits for the jobs given: name at least one file")
        check_metrics_port(settings)
    except ValueError as exc:
        raise fail(str(exc), code=2) from None
    try:
        documents = [d for f in job_files or [] for d in _documents(f)]  # none empty
        _check_identities(documents)
    except (ContractError, ValueError) as exc:
        raise fail(str(exc)) from None
    try:
        placement = PlacementConfig.from_dict(settings.placement)
    except ValueError as exc:
        raise fail(f"invalid settings: {exc}", code=2) from None
    heartbeat = (
        settings.heartbeat_interval if "heartbeat_interval" in settings.model_fields_set else 1.0
    )
    options = EmbeddedOptions(
        clusters=specs,
        backend=backend,
        heartbeat_interval=heartbeat,
        logs_dir=logs_dir,
        max_heartbeat_age=settings.max_heartbeat_age,
        placement=placement,
        exclusion_seconds=settings.exclusion_seconds,
        waiting_status_interval=settings.waiting_status_interval,
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


def _sandbox_workers(
    settings: TrainhubSettings,
) -> tuple[TrainhubSettings, dict[str, Backend], dict[str, list[str]]]:
    """The settings on the sandbox's broker (unless a bootstrap is given) and a kube backend
    per member cluster, as the worker identity its RBAC binds to the allowed namespaces."""
    from trainhub.sandbox.control import read_state

    state = read_state()
    if state is None or not state.clusters:
        raise fail(
            "no sandbox member clusters are running: start them with "
            "`trainhub sandbox up --clusters N`",
            code=2,
        )
    if not settings.bootstrap:
        settings = settings.model_copy(update={"bootstrap": state.kafka["bootstrap"]})
    backends = {
        c["name"]: make_worker_backend(
            "kube",
            c["name"],
            capacity="",
            kubeconfig=Path(c["workerKubeconfig"]),
            context=c["workerContext"],
            namespaces=list(c["namespaces"]),
        )
        for c in state.clusters
    }
    return settings, backends, {c["name"]: list(c["namespaces"]) for c in state.clusters}


def _documents(path: Path) -> list[dict[str, Any]]:
    docs = load_documents(read_text(path), str(path))
    bad = [d for d in docs if not isinstance(d, dict)]
    if bad or not docs:
        raise ContractError(f"{path}: expected job documents (mappings)")
    return docs


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
        for document in documents:
            uid, submissions[uid] = await submit_with_id(system.bus, system.topics, document)
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
                await _follow_until_finished(ours, len(uids), final, view.status, held)
        else:
            console.print(headline)
            printer = StatusPrinter(console)
            if not exit_on_finish:
                async for update in system.updates():
                    printer(update)
                return 0
            await _follow_until_finished(ours, len(uids), final, printer, held)
        for update in final.values():
            for pod, text in (await system.pod_logs(update)).items():
                tail = text.strip().splitlines()[-3:]
                for line in tail:
                    console.print(Text.assemble(("  " + pod, "dim"), " | ", line), highlight=False)
        ok = all(
            u.phase == JobPhase.SUCCEEDED and u.reason != ALREADY_EXISTS for u in final.values()
        )
        if held and any(u.phase == JobPhase.SUSPENDED for u in final.values()):
            console.print(
                "a job held suspended (runPolicy.suspend) never runs here: nothing can resume "
                "it on this in-memory bus (run on Kafka with --bootstrap and `trainhub resume`)"
            )
        console.print(
            Text("all jobs succeeded", style="bold green")
            if ok
            else Text("some jobs did not succeed", style="bold red")
        )
        return 0 if ok else 1


@app.command(
    epilog=examples(
        "trainhub hub --bootstrap localhost:9092",
        "trainhub hub --config hub.yaml --metrics-port 9100",
    )
)
@with_settings
def hub(settings: TrainhubSettings) -> None:
    """Run the hub: validate, place and follow jobs (needs Kafka)."""
    _require_bootstrap(settings)
    try:
        check_metrics_port(settings)
    except ValueError as exc:
        raise fail(str(exc), code=2) from None
    asyncio.run(run_hub(settings))


@app.command(
    "retire-cluster",
    epilog=examples(
        "trainhub retire-cluster east",
        "trainhub retire-cluster east --reason 'decommissioned'",
    ),
)
@with_settings
def retire_cluster_command(
    settings: TrainhubSettings,
    name: Annotated[str, typer.Argument(help="The member cluster's name.")],
    reason: Annotated[str | None, typer.Option(help="Why, for the hub's log.")] = None,
    force: Annotated[
        bool, typer.Option(help="Even if its heartbeat is fresh (its worker still runs).")
    ] = False,
) -> None:
    """Forget a member cluster whose worker is gone for good.

    The hub drops it (no more lost-cluster alerts for it) and moves its unfinished jobs
    elsewhere. Should its worker ever report again, the cluster is back."""
    _require_bootstrap(settings)

    async def retire() -> ClusterSnapshot:
        bus = make_bus(settings)
        await bus.start()
        try:
            return await retire_cluster(
                bus,
                settings.topics(),
                name,
                max_age=settings.max_heartbeat_age,
                force=force,
                reason=reason,
            )
        finally:
            await bus.close()

    try:
        snapshot = asyncio.run(retire())
    except (KeyError, ClusterStillReporting) as exc:
        raise fail(str(exc.args[0])) from None
    age = snapshot.age_seconds(datetime.now(UTC))
    console.print(f"retired cluster {name} (last heartbeat {age:.0f}s ago)")


@app.command(
    "member-rbac",
    epilog=examples(
        "trainhub member-rbac -n default -n team-a --user trainhub-worker",
        "trainhub member-rbac --service-account trainhub/east-worker",
    ),
)
def member_rbac_command(
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace", "-n", help="A namespace the worker accepts (repeatable); none: all."
        ),
    ] = None,
    user: Annotated[
        str | None, typer.Option(help=f"The worker's user (default {member_rbac.WORKER_USER}).")
    ] = None,
    service_account: Annotated[
        str | None, typer.Option(help="The worker's ServiceAccount instead: NAMESPACE/NAME.")
    ] = None,
) -> None:
    """Print the RBAC a worker's identity needs in its member cluster.

    YAML for `kubectl apply -f -`: the rules the sandbox gives its least-privilege worker.
    Give the namespaces the worker's `--namespace` accepts; without any it gets them
    everywhere."""
    namespaces = list(dict.fromkeys(namespace or []))
    bad = [n for n in namespaces if len(n) > 63 or not DNS1123_LABEL.match(n)]
    if bad:
        raise fail(f"--namespace {bad[0]!r}: a namespace is a DNS label ([a-z0-9-], at most 63)")
    if user is not None and service_account is not None:
        raise fail("give --user or --service-account, not both")
    if service_account is not None:
        owner, _, name = service_account.partition("/")
        if not (DNS1123_LABEL.match(owner) and name and len(name) <= 253):
            raise fail(f"--service-account {service_account!r}: expected NAMESPACE/NAME")
        subject = member_rbac.service_account(owner, name)
    else:
        name = user if user is not None else member_rbac.WORKER_USER
        if not name.strip():
            raise fail("--user must not be blank")
        subject = member_rbac.user(name)
    objects = member_rbac.manifests(namespaces, subject)
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))


@app.command(
    epilog=examples(
        "trainhub worker --cluster east --backend sim --capacity cpu=16,memory=64Gi",
        "trainhub worker --cluster west --capacity cpu=4,memory=8Gi,nodes=2",
        "trainhub worker --cluster gpu --backend kube --kubeconfig gpu-kubeconfig",
        "trainhub worker --cluster spot --backend sim --weight 80 --allow hostPath",
    )
)
@with_settings
def worker(
    settings: TrainhubSettings,
    cluster: Annotated[str, typer.Option("--cluster", help="This worker's cluster name.")],
    backend: Annotated[str, typer.Option(help="local, sim or kube.")] = "local",
    capacity: Annotated[
        str, typer.Option(help="local/sim capacity per node: cpu=8,memory=16Gi[,nodes=N,gpu=G].")
    ] = "cpu=4,memory=8Gi",
    label: Annotated[
        list[str] | None, typer.Option("--label", help="Cluster label K=V (repeatable).")
    ] = None,
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", help="Accepted namespace (repeatable).")
    ] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="kube backend: kubeconfig file.")] = None,
    context: Annotated[str | None, typer.Option(help="kube backend: kubeconfig context.")] = None,
    logs_dir: Annotated[
        Path | None, typer.Option(help="local and sim backends: pod logs here.")
    ] = None,
    weight: Annotated[
        float | None,
        typer.Option(help="Operator preference 0..100 for this cluster (cluster-weight score)."),
    ] = None,
    cost: Annotated[
        float | None,
        typer.Option(help="Relative price of this cluster (cost score: cheaper wins)."),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            help="Let pods ask for privileged, hostPath, hostNetwork or hostPID here "
            "(repeatable; refused by default).",
        ),
    ] = None,
) -> None:
    """Run one cluster's worker: create the pods of the jobs the hub assigns to it."""
    _require_bootstrap(settings)
    try:
        policy = ClusterPolicy.allowing(allow or [])
        if weight is not None and not 0 <= weight <= 100:
            raise ValueError(f"--weight must be within 0..100 (got {weight:g})")
        if cost is not None and not cost >= 0:
            raise ValueError(f"--cost must be >= 0 (got {cost:g})")
        check_cluster_name(cluster)
        malformed = [item for item in label or [] if "=" not in item]
        if malformed:
            raise ValueError(f"--label takes KEY=VALUE (got {', '.join(map(repr, malformed))})")
        labels = dict(item.split("=", 1) for item in label or [])
        wrong = [p for k, v in labels.items() if (p := label_problem(k, v)) is not None]
        if wrong:
            raise ValueError(f"--label: {wrong[0]}")
        chosen = make_worker_backend(
            backend,
            cluster,
            capacity=capacity,
            kubeconfig=kubeconfig,
            context=context,
            logs_dir=logs_dir,
            namespaces=namespace,
        )
        check_metrics_port(settings)
    except ValueError as exc:
        raise fail(str(exc), code=2) from None  # a usage error, as typer's and settings' are
    asyncio.run(
        run_worker(
            settings,
            chosen,
            cluster,
            labels=labels,
            namespaces=namespace,
            weight=weight,
            cost=cost,
            policy=policy,
        )
    )


@app.command(
    epilog=examples(
        "trainhub submit examples/jax-mnist-spmd/jaxjob.yaml --watch",
        "trainhub submit a.yaml b.yaml --bootstrap localhost:9092",
        "trainhub submit job.yaml --watch --no-live --topic-prefix demo",
    )
)
@with_settings
def submit(
    settings: TrainhubSettings,
    job_files: Annotated[list[Path], typer.Argument(help="Job YAML/JSON files.")],
    watch: Annotated[
        bool, typer.Option(help="Follow the jobs' status; exit 0 only if all Succeeded.")
    ] = False,
    validate: Annotated[
        bool, typer.Option(help="Refuse invalid jobs here instead of letting the hub reject them.")
    ] = True,
    live: Annotated[
        bool | None, typer.Option("--live/--no-live", help="With --watch: " + _LIVE_HELP)
    ] = None,
) -> None:
    """Publish jobs to the bus (the jobs topic).

    With --watch, a live view of the jobs and the clusters on a terminal, one line per status
    change when piped; exit 0 only if every job Succeeded, else 1."""
    _require_bootstrap(settings)
    if validate:  # every bad document named by file and position, and none sent
        _exit_on_problems(read_job_files(job_files))
    try:
        documents = [d for f in job_files for d in _documents(f)]
    except ContractError as exc:
        raise fail(str(exc)) from None
    raise typer.Exit(asyncio.run(_submit(settings, documents, watch, want_live(live))))


async def _submit(
    settings: TrainhubSettings, documents: list[dict[str, Any]], watch: bool, live: bool
) -> int:
    bus = make_bus(settings)
    topics = settings.topics()
    await bus.start()
    try:
        await bus.create_topics(topics.shared_specs())
        # Bound the read to recent history; the submission ids pick out our runs.
        since = int(time.time() * 1000) - 60_000
        submissions: dict[str, str] = {}
        uids = {}
        submitted: list[tuple[str, dict[str, Any]]] = []
        for document in documents:
            uid, submissions[uid] = await submit_with_id(bus, topics, document)
            submitted.append((uid, document))
            uids[uid] = (
                f"{document['metadata'].get('namespace', 'default')}/{document['metadata']['name']}"
            )
            console.print(f"submitted {uids[uid]} (uid {uid})", highlight=False)
        if not watch:
            return 0
        final: dict[str, JobStatusUpdate] = {}
        updates = follow_submissions(bus, topics, submissions, from_time_ms=since)
        if live:
            state = LiveState(
                title=f"trainhub submit --watch: {len(uids)} jobs",
                max_heartbeat_age=settings.max_heartbeat_age,
            )
            for uid, document in submitted:
                state.expect(uid, document, datetime.now(UTC))
            async with LiveView(console, state, bus, topics) as view:
                await _follow_until_finished(updates, len(uids), final, view.status)
        else:
            await _follow_until_finished(updates, len(uids), final, StatusPrinter(console))
        # A refused duplicate carries the existing job's phase: nothing ran for this call.
        ok = all(
            u.phase == JobPhase.SUCCEEDED and u.reason != ALREADY_EXISTS for u in final.values()
        )
        return 0 if ok else 1
    finally:
        await bus.close()


async def _follow_until_finished(
    updates: AsyncIterator[JobStatusUpdate],
    count: int,
    final: dict[str, JobStatusUpdate],
    show: Callable[[JobStatusUpdate], None],
    held_is_final: bool = False,
) -> None:
    """Show updates until `count` jobs finished (or were refused, or, `held_is_final`, are
    held suspended), keeping each last one."""
    async for update in updates:
        show(update)
        held = held_is_final and update.phase == JobPhase.SUSPENDED
        if update.phase.finished or update.reason == ALREADY_EXISTS or held:
            final[update.uid] = update
            if len(final) == count:
                return


@app.command(
    epilog=examples(
        "trainhub status default/jax-mnist",
        "trainhub status jax-mnist -o json --bootstrap localhost:9092",
    )
)
@with_settings
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
    _require_bootstrap(settings)
    qualified = _qualified(job, namespace)
    found = asyncio.run(_latest_status(settings, qualified))
    if found is None:
        # `_qualified` leaves a NAME bare only in the default namespace.
        searched = looked_for(qualified, "default")
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


def _job_request(settings: TrainhubSettings, job: str, event_type: str, verb: str) -> None:
    _require_bootstrap(settings)
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
        latest = await latest_status(bus, topics, _candidate_uids(job))
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


@app.command(
    epilog=examples(
        "trainhub delete default/jax-mnist",
        "trainhub delete jax-mnist --bootstrap localhost:9092 --topic-prefix demo",
    )
)
@with_settings
def delete(
    settings: TrainhubSettings,
    job: Annotated[str, typer.Argument(help="Job uid, NAMESPACE/NAME, or NAME.")],
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of a bare NAME.")
    ] = "default",
) -> None:
    """Delete a job: its pods go wherever they run."""
    _job_request(settings, _qualified(job, namespace), EventType.JOB_DELETED, "delete")


@app.command(
    epilog=examples(
        "trainhub suspend default/jax-mnist",
        "trainhub suspend jax-mnist --bootstrap localhost:9092 --topic-prefix demo",
    )
)
@with_settings
def suspend(
    settings: TrainhubSettings,
    job: Annotated[str, typer.Argument(help="Job uid, NAMESPACE/NAME, or NAME.")],
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of a bare NAME.")
    ] = "default",
) -> None:
    """Suspend a job: its pods and services are deleted until it is resumed."""
    _job_request(settings, _qualified(job, namespace), EventType.JOB_SUSPENDED, "suspend")


@app.command(
    epilog=examples(
        "trainhub resume default/jax-mnist",
        "trainhub resume jax-mnist --bootstrap localhost:9092 --topic-prefix demo",
    )
)
@with_settings
def resume(
    settings: TrainhubSettings,
    job: Annotated[str, typer.Argument(help="Job uid, NAMESPACE/NAME, or NAME.")],
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of a bare NAME.")
    ] = "default",
) -> None:
    """Resume a suspended job."""
    _job_request(settings, _qualified(job, namespace), EventType.JOB_RESUMED, "resume")


def _qualified(job: str, namespace: str) -> str:
    """NAME in `namespace` (`-n`); a uid or NAMESPACE/NAME stays as given."""
    return job if "/" in job or namespace == "default" else f"{namespace}/{job}"


def _candidate_uids(job: str) -> set[str]:
    """A uid as given, or the uid NAMESPACE/NAME derives (namespace default)."""
    namespace, _, name = job.rpartition("/")
    return {job, name, derive_job_uid(namespace or "default", name)}


async def _latest_status(
    settings: TrainhubSettings, job: str
) -> tuple[JobStatusUpdate, datetime] | None:
    bus = make_bus(settings)
    await bus.start()
    try:
        return await latest_status(bus, settings.topics(), _candidate_uids(job))
    finally:
        await bus.close()


def _require_bootstrap(settings: TrainhubSettings) -> None:
    if not settings.bootstrap:
        raise fail(
            "this command needs Kafka: pass --bootstrap HOST:PORT or set TRAINHUB_BOOTSTRAP "
            "(`trainhub sandbox up` starts a local broker)",
            code=2,
        )


sandbox_app = typer.Typer(
    help="A local Kafka broker and Kubernetes member clusters for demos.",
    epilog=examples(
        "trainhub sandbox up --clusters 2",
        "trainhub sandbox status -o json",
        "trainhub sandbox down",
    ),
)
app.add_typer(sandbox_app, name="sandbox")
register_job_commands(app)


@sandbox_app.command(
    "up",
    epilog=examples(
        "trainhub sandbox up",
        "trainhub sandbox up --clusters 2",
        "trainhub sandbox up --clusters-file clusters.yaml",
        "trainhub sandbox up --acls --acl-clusters east,west",
    ),
)
def sandbox_up_command(
    clusters: Annotated[int, typer.Option("--clusters", help="Member clusters to start.")] = 0,
    clusters_file: Annotated[
        Path | None, typer.Option(help="YAML {clusters: [{name, pools: [...]}]} instead.")
    ] = None,
    acls: Annotated[
        bool,
        typer.Option(
            "--acls",
            help="Authorise every Kafka request: users hub, producer and worker-<cluster>, "
            "each with its role's ACLs and a --config file (see `sandbox status`).",
        ),
    ] = False,
    acl_clusters: Annotated[
        str,
        typer.Option(
            help="With --acls: comma-separated clusters to make worker users for "
            "(default: the member clusters, or cluster-1)."
        ),
    ] = "",
) -> None:
    """Start the sandbox; it keeps running until `trainhub sandbox down`."""
    from trainhub.sandbox.control import sandbox_up
    from trainhub.sandbox.errors import SandboxError

    served = [c.strip() for c in acl_clusters.split(",") if c.strip()]
    if served and not acls:
        raise fail("--acl-clusters needs --acls")
    try:
        state = sandbox_up(clusters, clusters_file, acls=acls, acl_clusters=served)
    except (SandboxError, OSError, ValueError) as exc:
        raise fail(str(exc)) from None
    if acls:
        console.print(f"kafka: {state.kafka['sasl_bootstrap']} (SCRAM-SHA-512, ACLs on)")
        _print_sandbox_users(state.kafka)
    else:
        console.print(
            f"kafka: {state.kafka['bootstrap']} "
            f"(export TRAINHUB_BOOTSTRAP={state.kafka['bootstrap']})"
        )
    for cluster in state.clusters:
        console.print(f"cluster {cluster['name']}: kubeconfig {cluster['kubeconfig']}")


@sandbox_app.command(
    "status",
    epilog=examples("trainhub sandbox status", "trainhub sandbox status -o json"),
)
def sandbox_status_command(
    output: Annotated[Output, typer.Option("-o", "--output")] = Output.text,
) -> None:
    """Show how to reach the running sandbox."""
    from trainhub.sandbox.control import read_state

    state = read_state()
    if state is None:
        raise fail("no sandbox is running (start one with `trainhub sandbox up`)", code=3)
    if output != Output.text:
        print_structured(state.public(), output.value)
        return
    console.print(f"kafka: {state.kafka['bootstrap']} (SCRAM: {state.kafka['sasl_bootstrap']})")
    _print_sandbox_users(state.kafka)
    for cluster in state.clusters:
        console.print(f"cluster {cluster['name']}: {cluster['kubeconfig']} ({cluster['context']})")


def _print_sandbox_users(kafka: dict[str, Any]) -> None:
    """The users `sandbox up --acls` made, each with its --config file."""
    for user, entry in kafka.get("users", {}).items():
        console.print(f"  {entry['role']} user {user}: --config {entry['config']}")


@sandbox_app.command("down", epilog=examples("trainhub sandbox down"))
def sandbox_down_command() -> None:
    """Stop every sandbox process, by PID."""
    from trainhub.sandbox.control import sandbox_down

    stopped = sandbox_down()
    console.print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


tidy_help(app)


def main() -> None:
    try:
        app()
    except BusError as exc:
        err_console.print(error_text(str(exc)), highlight=False)
        sys.exit(2)
    except ServiceCrashed as exc:  # the cause is in the log above, with its traceback
        err_console.print(error_text(f"stopped: {exc}"), highlight=False)
        sys.exit(1)
