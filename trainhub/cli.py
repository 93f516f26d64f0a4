"""`trainhub`: run, render, plan, submit and follow training jobs.

The one `app`; each group of commands lives in a module of its own and registers here, in the
order `trainhub --help` lists them."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from bus.base import BusError
from schemas.errors import JobInvalid
from schemas.trainer_runtimes import RUNTIMES_ENV, use_runtime_dirs
from trainhub import cli_offline, cli_operate, cli_requests, cli_runtimes, cli_submit, cli_up
from trainhub.cli_help import examples, tidy_help
from trainhub.cli_jobs import get_app
from trainhub.cli_jobs import register as register_job_commands
from trainhub.cli_output import err_console, fail
from trainhub.console_view import error_text
from trainhub.embedded import make_worker_backend
from trainhub.logs import setup_logging
from trainhub.processes import ServiceCrashed
from trainhub.settings import TrainhubSettings
from workers.backends.base import Backend

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
    runtimes: Annotated[
        list[Path] | None,
        typer.Option(
            "--runtimes",
            metavar="DIR",
            help="TrainJob runtimes of your own: every (Cluster)TrainingRuntime in DIR's YAML "
            f"files, besides the shipped ones (repeatable; or {RUNTIMES_ENV}).",
        ),
    ] = None,
) -> None:
    setup_logging(logging.WARNING - 10 * verbose)
    if runtimes:
        try:
            use_runtime_dirs(runtimes)
        except JobInvalid as exc:
            raise fail(str(exc), code=2) from None


cli_offline.register(app)
cli_up.register(app)
cli_operate.register(app)
cli_submit.register(app)
cli_requests.register(app)


def _sandbox_workers(
    settings: TrainhubSettings,
) -> tuple[TrainhubSettings, dict[str, Backend], dict[str, list[str]]]:
    """The settings on the sandbox's broker (unless a bootstrap is given) and a kube backend
    per member cluster, as the worker identity its RBAC binds to the allowed namespaces."""
    try:
        from trainhub_sandbox.control import read_state
    except ModuleNotFoundError as exc:
        if exc.name != "trainhub_sandbox":
            raise
        raise fail("--sandbox needs trainhub_sandbox (the dev extra)", code=2) from None

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
            gang_scheduling=settings.worker_config(c["name"]).gang_scheduling,
            delegate=settings.mode == "delegate",
            managed_by=settings.delegate_managed_by,
        )
        for c in state.clusters
    }
    return settings, backends, {c["name"]: list(c["namespaces"]) for c in state.clusters}


try:  # the sandbox's commands, where trainhub_sandbox is installed (the dev extra)
    from trainhub_sandbox.cli import sandbox_app
except ModuleNotFoundError as exc:
    if exc.name != "trainhub_sandbox":
        raise
else:
    app.add_typer(sandbox_app, name="sandbox")
register_job_commands(app)
cli_runtimes.register(app, get_app)


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
