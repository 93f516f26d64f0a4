"""`trainhub`: run, render, plan, submit and follow training jobs."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

from dispatcher.placement import plan_placement
from dispatcher.registry import ClusterRegistry
from schemas.cluster import ClustersFile
from schemas.errors import ContractError
from schemas.job_parsing import load_documents, load_job_file
from trainhub.console_view import StatusPrinter, decision_table
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.logs import setup_logging
from workers.cluster_spec import parse_cluster_spec
from workers.rendering import render_job

app = typer.Typer(
    help="trainhub: dispatch Kubeflow training jobs across Kubernetes clusters over an event bus.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

DEFAULT_CLUSTERS = ["east:cpu=4,memory=8Gi", "west:cpu=8,memory=16Gi"]


class Output(StrEnum):
    text = "text"
    json = "json"
    yaml = "yaml"


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


@app.callback()
def _root(
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="More logs.")] = 0,
) -> None:
    setup_logging(logging.WARNING - 10 * verbose)


@app.command()
def render(
    job_file: Annotated[Path, typer.Argument(help="Job YAML/JSON (kubeflow.org/v1).")],
    output: Annotated[Output, typer.Option("-o", "--output")] = Output.yaml,
) -> None:
    """Print the Kubernetes objects a worker would create for the job (no cluster needed)."""
    try:
        jobs = load_job_file(job_file)
        objects = [m for job in jobs for m in render_job(job).manifests()]
    except ContractError as exc:
        raise fail(str(exc)) from None
    if output == Output.json:
        sys.stdout.write(json.dumps(objects, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(objects, sort_keys=False))


@app.command()
def plan(
    job_file: Annotated[Path, typer.Argument(help="Job YAML/JSON.")],
    clusters: Annotated[
        Path, typer.Option("--clusters", help="YAML {clusters: [ClusterSnapshot]}")
    ],
    output: Annotated[Output, typer.Option("-o", "--output")] = Output.text,
    max_heartbeat_age: Annotated[
        float, typer.Option(help="Seconds before a snapshot is stale.")
    ] = 30.0,
) -> None:
    """Show where the job would be placed, with every cluster's score or rejection reason."""
    try:
        jobs = load_job_file(job_file)
        documents = load_documents(clusters.read_text(), str(clusters))
        if len(documents) != 1:
            raise ContractError(f"{clusters}: expected one document with a `clusters` list")
        snapshots = ClustersFile.model_validate(documents[0]).clusters
    except ContractError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"{clusters}: {exc.strerror}") from None
    except ValueError as exc:
        raise fail(f"{clusters}: {exc}") from None
    registry = ClusterRegistry(max_heartbeat_age)
    for snapshot in snapshots:
        registry.update(snapshot)
    results = [
        plan_placement(job, registry.all(), max_heartbeat_age=max_heartbeat_age).decision
        for job in jobs
    ]
    if output == Output.json:
        payload: Any = [r.model_dump(mode="json") for r in results]
        sys.stdout.write(json.dumps(payload[0] if len(payload) == 1 else payload, indent=2) + "\n")
        return
    for job, decision in zip(jobs, results, strict=True):
        console.print(decision_table(decision, f"placement of {job.key}"))
        console.print(f"chosen: {decision.chosen or 'none (the job would wait or be rejected)'}")


@app.command()
def up(
    job_files: Annotated[list[Path] | None, typer.Argument(help="Jobs to submit.")] = None,
    cluster: Annotated[
        list[str] | None,
        typer.Option("--cluster", help="NAME:cpu=8,memory=16Gi[,nodes=N,gpu=G] (repeatable)."),
    ] = None,
    backend: Annotated[str, typer.Option(help="local (real processes) or sim.")] = "local",
    exit_on_finish: Annotated[
        bool, typer.Option(help="Exit when every job finished: 0 only if all Succeeded.")
    ] = False,
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics on this port.")] = None,
    heartbeat_interval: Annotated[float, typer.Option(help="Seconds between heartbeats.")] = 1.0,
    logs_dir: Annotated[Path | None, typer.Option(help="Keep pod logs here.")] = None,
) -> None:
    """Run the hub, the clusters' workers and an in-memory bus in one process."""
    try:
        specs = [parse_cluster_spec(c) for c in (cluster or DEFAULT_CLUSTERS)]
        documents = [d for f in job_files or [] for d in _documents(f)]
    except (ContractError, ValueError) as exc:
        raise fail(str(exc)) from None
    options = EmbeddedOptions(
        clusters=specs, backend=backend, heartbeat_interval=heartbeat_interval, logs_dir=logs_dir
    )
    code = asyncio.run(_run_up(options, documents, exit_on_finish, metrics_port))
    raise typer.Exit(code)


def _documents(path: Path) -> list[dict[str, Any]]:
    try:
        docs = load_documents(path.read_text(), str(path))
    except OSError as exc:
        raise ContractError(f"{path}: {exc.strerror}") from exc
    bad = [d for d in docs if not isinstance(d, dict)]
    if bad or not docs:
        raise ContractError(f"{path}: expected job documents (mappings)")
    return docs


async def _run_up(
    options: EmbeddedOptions,
    documents: list[dict[str, Any]],
    exit_on_finish: bool,
    metrics_port: int | None,
) -> int:
    async with Embedded(options) as system:
        if metrics_port is not None:
            from prometheus_client import start_http_server

            start_http_server(metrics_port, registry=system.registry)
            console.print(f"metrics on http://127.0.0.1:{metrics_port}/metrics")
        names = ", ".join(w.cluster for w in system.workers)
        count = len(system.workers)
        console.print(f"trainhub up: hub + {count} clusters ({names}), {options.backend} backend")
        uids = [await system.submit(d) for d in documents]
        printer = StatusPrinter(console)
        if not exit_on_finish:
            async for update in system.updates():
                printer(update)
            return 0
        final = await system.wait_finished(uids, printer)
        for update in final.values():
            for pod, text in (await system.pod_logs(update)).items():
                tail = text.strip().splitlines()[-3:]
                for line in tail:
                    console.print(f"  [dim]{pod}[/] | {line}", highlight=False)
        ok = all(u.phase.value == "Succeeded" for u in final.values())
        console.print(
            "[bold green]all jobs succeeded[/]" if ok else "[bold red]some jobs did not succeed[/]"
        )
        return 0 if ok else 1


def main() -> None:
    app()
