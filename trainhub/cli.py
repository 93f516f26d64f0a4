"""`trainhub`: run, render, plan, submit and follow training jobs.

The one `app`; each group of commands lives in a module of its own and registers here, in the
order `trainhub --help` lists them."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from bus.base import BusError
from trainhub import cli_offline, cli_operate, cli_requests, cli_submit, cli_up
from trainhub.cli_help import examples, tidy_help
from trainhub.cli_jobs import print_structured
from trainhub.cli_jobs import register as register_job_commands
from trainhub.cli_output import Output, console, err_console, fail
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
) -> None:
    setup_logging(logging.WARNING - 10 * verbose)


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
