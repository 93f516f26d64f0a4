"""`trainhub submit`: publish jobs to the bus and, with --watch, follow them until they end;
the reading of job files and the following that `trainhub up` shares."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from schemas.errors import ContractError
from schemas.events import JobStatusUpdate
from schemas.job_controls import TRAINJOB_KIND, control_field, job_controls
from schemas.job_parsing import load_documents, read_text
from schemas.run_policy import TRAINHUB_MANAGER
from schemas.status import ALREADY_EXISTS, JobPhase
from schemas.trainer import TRAINJOB_CONTROLLER
from trainhub.bus_factory import bus_runtimes, make_bus
from trainhub.cli_help import examples
from trainhub.cli_live import LiveState, LiveView, want_live
from trainhub.cli_output import console, exit_on_problems, fail, require_bootstrap
from trainhub.cli_settings import CREATE_TOPICS, SUBMIT, with_settings
from trainhub.console_view import StatusPrinter
from trainhub.job_checks import read_job_files, unknown_runtime
from trainhub.producer import follow_submissions, submit_with_id
from trainhub.settings import TrainhubSettings

LIVE_HELP = "A live table of jobs and clusters (default: when stdout is a terminal)."


def register(app: typer.Typer) -> None:
    """Add `submit` to the `trainhub` command."""
    app.command(
        epilog=examples(
            "trainhub submit examples/jax-mnist-spmd/jaxjob.yaml --watch",
            "trainhub submit a.yaml b.yaml --bootstrap localhost:9092",
            "trainhub submit job.yaml --watch --no-live --topic-prefix demo",
            "trainhub submit - < job.yaml",
        )
    )(submit)


@with_settings(*CREATE_TOPICS, *SUBMIT, "max_heartbeat_age")
def submit(
    settings: TrainhubSettings,
    job_files: Annotated[
        list[Path], typer.Argument(help="Job YAML/JSON files; - reads the documents from stdin.")
    ],
    watch: Annotated[
        bool, typer.Option(help="Follow the jobs' status; exit 0 only if all Succeeded.")
    ] = False,
    validate: Annotated[
        bool, typer.Option(help="Refuse invalid jobs here instead of letting the hub reject them.")
    ] = True,
    live: Annotated[
        bool | None, typer.Option("--live/--no-live", help="With --watch: " + LIVE_HELP)
    ] = None,
) -> None:
    """Publish jobs to the bus (the jobs topic).

    With --watch, a live view of the jobs and the clusters on a terminal, one line per status
    change when piped; exit 0 only if every job Succeeded, else 1 (naming each job that did
    not, and why). A job without `runPolicy.managedBy` is given trainhub's, as the SDK does,
    unless the setting `default_managed_by` is false (then it is warned of: the hub leaves
    such a job alone, Skipped)."""
    require_bootstrap(settings)
    texts = read_stdin(job_files)
    if validate:  # every bad document named by file and position, and none sent
        checked = read_job_files(job_files, texts)
        if unknown_runtime(checked.problems):  # perhaps one applied on the bus
            runtimes = asyncio.run(bus_runtimes(settings))
            checked = read_job_files(job_files, texts, runtimes)
        exit_on_problems(checked)
    try:
        documents = [d for f in job_files for d in job_documents(f, texts.get(f))]
    except ContractError as exc:
        raise fail(str(exc)) from None
    for warning in managers(documents, settings.default_managed_by):
        console.print(f"warning: {warning}", style="yellow", highlight=False)
    raise typer.Exit(asyncio.run(_submit(settings, documents, watch, want_live(live))))


STDIN = Path("-")


def read_stdin(paths: Sequence[Path]) -> dict[Path, str]:
    """`-` among the files: stdin's text, read once."""
    if STDIN not in paths:
        return {}
    if paths.count(STDIN) > 1:
        raise fail("- (stdin) can be given once", code=2)
    return {STDIN: sys.stdin.read()}


def job_documents(path: Path, text: str | None = None) -> list[dict[str, Any]]:
    """The job documents of a file (or of `text`, already read from it: stdin)."""
    origin = "<stdin>" if path == STDIN else str(path)
    docs = load_documents(read_text(path) if text is None else text, origin)
    bad = [d for d in docs if not isinstance(d, dict)]
    if bad or not docs:
        raise ContractError(f"{origin}: expected job documents (mappings)")
    return docs


def managers(documents: Iterable[dict[str, Any]], default_managed_by: bool) -> list[str]:
    """Give each job without `runPolicy.managedBy` trainhub's when `default_managed_by` (as
    the SDK does: a stock Kubeflow document runs as written); else the warnings for the jobs
    the hub will leave alone (Skipped), as it does those another manager owns."""
    warnings = []
    for document in documents:
        policy = job_controls(document)
        if policy is None:
            continue  # the hub refuses it; validation says why
        manager = policy.get("managedBy")
        if manager is None and default_managed_by:
            policy["managedBy"] = TRAINHUB_MANAGER
        elif manager != TRAINHUB_MANAGER:
            said = manager or f"unset ({_upstream_manager(document)})"
            warnings.append(
                f"{_shown(document)}: {control_field(document.get('kind'), 'managedBy')} is "
                f"{said}: the hub records the job and leaves it alone (Skipped); set it to "
                f"{TRAINHUB_MANAGER}"
                + ("" if manager else " or leave the setting default_managed_by on")
            )
    return warnings


TRAINING_OPERATOR = "kubeflow.org/training-operator"


def _upstream_manager(document: Mapping[str, Any]) -> str:
    return TRAINJOB_CONTROLLER if document.get("kind") == TRAINJOB_KIND else TRAINING_OPERATOR


def _shown(document: Mapping[str, Any]) -> str:
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name', '?')}"


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
                await follow_until_finished(updates, len(uids), final, view.status)
        else:
            await follow_until_finished(updates, len(uids), final, StatusPrinter(console))
        for line in unsuccessful(final, uids):
            console.print(line, highlight=False)
        return 0 if all_succeeded(final) else 1
    finally:
        await bus.close()


def all_succeeded(final: dict[str, JobStatusUpdate]) -> bool:
    # A refused duplicate carries the existing job's phase: nothing ran for this call.
    return all(u.phase == JobPhase.SUCCEEDED and u.reason != ALREADY_EXISTS for u in final.values())


def unsuccessful(final: dict[str, JobStatusUpdate], names: Mapping[str, str]) -> list[str]:
    """A line per job that did not succeed, named (namespace/name), with its phase and
    reason (the message went out with its status line, above or in the live view)."""
    lines = []
    for uid, update in final.items():
        if update.phase == JobPhase.SUCCEEDED and update.reason != ALREADY_EXISTS:
            continue
        name = names.get(uid) or (
            f"{update.namespace or 'default'}/{update.name}" if update.name else uid
        )
        why = update.reason or update.message
        lines.append(f"{name}: {update.phase.value}" + (f" ({why})" if why else ""))
    return lines


async def follow_until_finished(
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
