"""`trainhub sandbox up|status|down`: the sandbox's commands, a typer group that trainhub's
CLI adds where this package is installed (the dev extra). The sandbox itself is imported by
each command, so that `trainhub --help` stays quick."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bus.topics import Topics
from trainhub.cli_help import examples
from trainhub.cli_jobs import print_structured
from trainhub.cli_output import Output, console, fail
from trainhub_sandbox.errors import SandboxError

sandbox_app = typer.Typer(
    help="A local Kafka broker and Kubernetes member clusters for demos.",
    epilog=examples(
        "trainhub sandbox up --clusters 2",
        "trainhub sandbox up --brokers 3",
        "trainhub sandbox status -o json",
        "trainhub sandbox down",
    ),
)


@sandbox_app.command(
    "up",
    epilog=examples(
        "trainhub sandbox up",
        "trainhub sandbox up --clusters 2",
        "trainhub sandbox up --brokers 3 --clusters 2",
        "trainhub sandbox up --clusters-file clusters.yaml",
        "trainhub sandbox up --acls --acl-clusters east,west",
        "trainhub sandbox up --clusters 1 --gang-scheduler scheduler-plugins",
        "trainhub sandbox up --clusters 2 --training-operator",
    ),
)
def sandbox_up_command(
    clusters: Annotated[int, typer.Option("--clusters", help="Member clusters to start.")] = 0,
    brokers: Annotated[
        int,
        typer.Option(
            "--brokers",
            min=1,
            help="Kafka brokers (KRaft nodes, each also a controller quorum voter); from 3 "
            "on, internal topics get 3 replicas and min.insync.replicas 2: run trainhub "
            "with --replication 3.",
        ),
    ] = 1,
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
    gang_scheduler: Annotated[
        str | None,
        typer.Option(
            "--gang-scheduler",
            help="scheduler-plugins: every member cluster also runs scheduler-plugins' "
            "scheduler (Coscheduling, schedulerName scheduler-plugins-scheduler) with its "
            "PodGroup CRD; built from its Go module on first use (minutes, then cached).",
        ),
    ] = None,
    training_operator: Annotated[
        bool,
        typer.Option(
            "--training-operator",
            help="Every member cluster also runs the Kubeflow Training Operator v1.9.0 "
            "(its CRDs installed; the worker identity may hand it jobs: `trainhub worker "
            "--mode delegate`); built from its Go module on first use (minutes, then cached).",
        ),
    ] = False,
    kubeflow_crds: Annotated[
        bool,
        typer.Option(
            "--kubeflow-crds",
            help="Every member cluster serves the Training Operator's kubeflow.org CRDs "
            "without running it: a direct-mode worker makes each job's own object there "
            "(`kubectl get pytorchjobs`). Taken from its Go module (cached after one build).",
        ),
    ] = False,
    garbage_collector: Annotated[
        bool,
        typer.Option(
            "--garbage-collector",
            help="Every member cluster also runs kube-controller-manager with only its garbage "
            "collector (what a deleted owner owned is deleted, e.g. a job's pods with its "
            "CR); built from the Kubernetes module on first use (about 1.5 min after the "
            "apiserver's build, then cached).",
        ),
    ] = False,
) -> None:
    """Start the sandbox; it keeps running until `trainhub sandbox down`."""
    from trainhub_sandbox.control import sandbox_up

    served = [c.strip() for c in acl_clusters.split(",") if c.strip()]
    if served and not acls:
        raise fail("--acl-clusters needs --acls")
    if gang_scheduler not in (None, "scheduler-plugins"):
        raise fail(f"--gang-scheduler {gang_scheduler!r}: the sandbox runs scheduler-plugins")
    try:
        state = sandbox_up(
            clusters,
            clusters_file,
            acls=acls,
            acl_clusters=served,
            brokers=brokers,
            gang_scheduler=gang_scheduler,
            training_operator=training_operator,
            kubeflow_crds=kubeflow_crds,
            garbage_collector=garbage_collector,
        )
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
    _print_brokers(state.kafka)
    for cluster in state.clusters:
        extras = [f"gang scheduler {cluster['gangScheduler']}"] if cluster["gangScheduler"] else []
        if cluster.get("trainingOperator"):
            extras.append("Training Operator")
        elif cluster.get("kubeflowCrds"):
            extras.append("Kubeflow CRDs")
        if cluster.get("garbageCollector"):
            extras.append("garbage collector")
        shown = f" ({', '.join(extras)})" if extras else ""
        console.print(f"cluster {cluster['name']}: kubeconfig {cluster['kubeconfig']}{shown}")


@sandbox_app.command(
    "status",
    epilog=examples("trainhub sandbox status", "trainhub sandbox status -o json"),
)
def sandbox_status_command(
    output: Annotated[Output, typer.Option("-o", "--output")] = Output.text,
) -> None:
    """Show how to reach the running sandbox."""
    from trainhub_sandbox.control import read_state

    state = read_state()
    if state is None:
        raise fail("no sandbox is running (start one with `trainhub sandbox up`)", code=3)
    if output != Output.text:
        print_structured(state.public(), output.value)
        return
    console.print(f"kafka: {state.kafka['bootstrap']} (SCRAM: {state.kafka['sasl_bootstrap']})")
    _print_brokers(state.kafka)
    _print_sandbox_users(state.kafka)
    for cluster in state.clusters:
        console.print(f"cluster {cluster['name']}: {cluster['kubeconfig']} ({cluster['context']})")


def _print_brokers(kafka: dict[str, Any]) -> None:
    """A cluster's nodes, and the replication its topics should get."""
    nodes = kafka.get("brokers") or []
    if len(nodes) < 2:
        return
    for node in nodes:
        console.print(f"  broker {node['nodeId']}: {node['bootstrap']} (pid {node['pid']})")
    replication = int(kafka.get("replication", 1))
    console.print(
        f"  run trainhub with --replication {replication} "
        f"(export TRAINHUB_REPLICATION={replication}): topics then get "
        f"min.insync.replicas {Topics(replication=replication).min_insync}"
    )


def _print_sandbox_users(kafka: dict[str, Any]) -> None:
    """The users `sandbox up --acls` made, each with its --config file."""
    for user, entry in kafka.get("users", {}).items():
        console.print(f"  {entry['role']} user {user}: --config {entry['config']}")


@sandbox_app.command("down", epilog=examples("trainhub sandbox down"))
def sandbox_down_command() -> None:
    """Stop every sandbox process, by PID."""
    from trainhub_sandbox.control import sandbox_down

    stopped = sandbox_down()
    console.print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
