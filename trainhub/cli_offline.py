"""`trainhub render` and `trainhub plan`: what a worker would create and where the hub would
place jobs, answered from files alone (no bus, no cluster)."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from dispatcher.placement_config import PlacementConfig
from schemas.cluster import ClustersFile, ClusterSnapshot
from schemas.errors import ContractError, describe_validation_error
from schemas.job_parsing import load_documents, read_text
from trainhub.cli_help import examples
from trainhub.cli_jobs import _with_client, print_structured
from trainhub.cli_output import Output, console, exit_on_problems, fail
from trainhub.cli_plan import PlannedJob, plan_jobs
from trainhub.cli_settings import READ_BUS, with_settings
from trainhub.console_view import decision_table
from trainhub.job_checks import read_job_files
from trainhub.sdk import AsyncTrainHubClient
from trainhub.settings import TrainhubSettings
from workers.gang_scheduling import GangScheduling
from workers.rendering import render_job


class ManifestFormat(StrEnum):
    """How `render` writes Kubernetes objects: as documents, no table."""

    yaml = "yaml"
    json = "json"


def register(app: typer.Typer) -> None:
    """Add `render` and `plan` to the `trainhub` command."""
    app.command(
        epilog=examples(
            "trainhub render examples/jax-mnist-spmd/jaxjob.yaml",
            "trainhub render job.yaml -o json",
            "trainhub render job.yaml --gang-scheduler scheduler-plugins",
        )
    )(render)
    app.command(
        epilog=examples(
            "trainhub plan job.yaml --clusters clusters.yaml",
            "trainhub plan job.yaml --bootstrap localhost:9092   # the live fleet",
            "trainhub plan a.yaml b.yaml --clusters clusters.yaml --config hub.yaml -o json",
        )
    )(plan)


def render(
    job_file: Annotated[Path, typer.Argument(help="Job YAML/JSON (kubeflow.org/v1).")],
    output: Annotated[ManifestFormat, typer.Option("-o", "--output")] = ManifestFormat.yaml,
    gang_scheduler: Annotated[
        str | None,
        typer.Option(
            "--gang-scheduler",
            help="As a worker with this gang scheduler (volcano or scheduler-plugins): the "
            "job's PodGroup too, and pods that join it.",
        ),
    ] = None,
    gang_scheduler_name: Annotated[
        str | None,
        typer.Option(help="With --gang-scheduler: the pods' schedulerName."),
    ] = None,
) -> None:
    """Print the Kubernetes objects a worker would create for the jobs (no cluster needed).

    Every valid job of the file is rendered; each document the hub would reject is named on
    stderr with the reason, and then the exit code is 1. A PodGroup's minResources orders
    replica types by PriorityClass value as if none of the classes existed (a worker reads
    them from its cluster)."""
    try:
        gang = GangScheduling.of(gang_scheduler, gang_scheduler_name)
    except ValueError as exc:
        raise fail(str(exc), code=2) from None
    found = read_job_files([job_file])
    objects: list[dict[str, Any]] = []
    for job in found.jobs:
        try:
            objects.extend(render_job(job, gang=gang).manifests())
        except ContractError as exc:
            found.problems.append(f"{job.kind} {job.key}: {exc}")
    if objects:  # every job has pods: none rendered, nothing to print
        print_structured(objects, output.value)
    exit_on_problems(found)


@with_settings(*READ_BUS, "max_heartbeat_age")
def plan(
    settings: TrainhubSettings,
    job_files: Annotated[list[Path], typer.Argument(help="Job YAML/JSON files.")],
    clusters: Annotated[
        Path | None,
        typer.Option(
            "--clusters",
            help="YAML {clusters: [ClusterSnapshot]}; without it, the live fleet's latest "
            "heartbeats, read from --bootstrap.",
        ),
    ] = None,
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
    snapshots = _clusters_file(clusters) if clusters else _live_clusters(settings)
    planned = plan_jobs(
        found.jobs, snapshots, placement, max_heartbeat_age=settings.max_heartbeat_age
    )
    _show_plan(planned, placement, output)
    exit_on_problems(found)


def _live_clusters(settings: TrainhubSettings) -> list[ClusterSnapshot]:
    """The member clusters whose heartbeats the clusters topic holds (the hub's view, less
    what it has reserved for jobs not yet running)."""
    if not settings.bootstrap:
        raise fail(
            "plan needs the clusters: --clusters FILE, or --bootstrap HOST:PORT (or "
            "TRAINHUB_BOOTSTRAP) to read the live fleet's heartbeats",
            code=2,
        )

    async def work(client: AsyncTrainHubClient) -> list[ClusterSnapshot]:
        return await client.list_clusters(window=settings.max_heartbeat_age)

    snapshots = _with_client(settings, work)
    if not snapshots:
        raise fail(
            f"no member cluster reports on {settings.bootstrap} (topic prefix "
            f"{settings.topic_prefix!r}): start a worker, or give --clusters FILE",
            code=1,
        )
    return snapshots


def _clusters_file(clusters: Path) -> list[ClusterSnapshot]:
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
        return ClustersFile.model_validate(documents[0]).clusters
    except ValidationError as exc:
        raise fail(f"{clusters}: {describe_validation_error(exc)}") from None
    except ContractError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"{clusters}: {exc.strerror}") from None
    except ValueError as exc:
        raise fail(f"{clusters}: {exc}") from None


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
        decision = item.placement.full_decision()
        console.print(decision_table(decision, title))
        console.print(
            f"chosen: {decision.chosen or 'none (the job would wait or be rejected)'}",
            highlight=False,
        )
