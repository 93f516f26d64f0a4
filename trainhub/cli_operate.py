"""The commands of a deployment's operators: run the hub, run one cluster's worker, retire a
member cluster, and print the RBAC a worker's identity needs in its member cluster."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
import yaml

from schemas.cluster import ClusterPolicy, ClusterSnapshot, pod_security_level
from schemas.names import DNS1123_LABEL, label_problem
from trainhub import member_rbac
from trainhub.bus_factory import make_bus
from trainhub.cli_help import examples
from trainhub.cli_output import console, fail, require_bootstrap
from trainhub.cli_settings import CREATE_TOPICS, HUB, READ_BUS, WORKER, with_settings
from trainhub.embedded import make_worker_backend
from trainhub.processes import check_metrics_port, run_hub, run_worker
from trainhub.producer import ClusterStillReporting, retire_cluster
from trainhub.settings import TrainhubSettings
from workers.backends.registry import BACKENDS, spoken
from workers.cluster_spec import check_cluster_name
from workers.gang_scheduling import GANG_SCHEDULERS


def register(app: typer.Typer) -> None:
    """Add `hub`, `retire-cluster`, `member-rbac` and `worker` to the `trainhub` command."""
    app.command(
        epilog=examples(
            "trainhub hub --bootstrap localhost:9092",
            "trainhub hub --config hub.yaml --metrics-port 9100",
        )
    )(hub)
    app.command(
        "retire-cluster",
        epilog=examples(
            "trainhub retire-cluster east",
            "trainhub retire-cluster east --reason 'decommissioned'",
        ),
    )(retire_cluster_command)
    app.command(
        "member-rbac",
        epilog=examples(
            "trainhub member-rbac -n default -n team-a --user trainhub-worker",
            "trainhub member-rbac --service-account trainhub/east-worker",
            "trainhub member-rbac -n team-a --gang-scheduler scheduler-plugins",
            "trainhub member-rbac -n team-a --delegate",
        ),
    )(member_rbac_command)
    app.command(
        epilog=examples(
            "trainhub worker --cluster east --backend sim --capacity cpu=16,memory=64Gi",
            "trainhub worker --cluster west --capacity cpu=4,memory=8Gi,nodes=2",
            "trainhub worker --cluster gpu --backend kube --kubeconfig gpu-kubeconfig",
            "trainhub worker --cluster ops --backend kube --kubeconfig ops --mode delegate",
            "trainhub worker --cluster spot --backend sim --weight 80 --allow hostPath",
        )
    )(worker)


@with_settings(*CREATE_TOPICS, *HUB)
def hub(settings: TrainhubSettings) -> None:
    """Run the hub: validate, place and follow jobs (needs Kafka)."""
    require_bootstrap(settings)
    try:
        check_metrics_port(settings)
    except ValueError as exc:
        raise fail(str(exc), code=2) from None
    asyncio.run(run_hub(settings))


@with_settings(*READ_BUS, "max_heartbeat_age")
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
    require_bootstrap(settings)

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
    gang_scheduler: Annotated[
        str | None,
        typer.Option(
            "--gang-scheduler",
            help="The worker's --gang-scheduler (volcano or scheduler-plugins): its PodGroups too.",
        ),
    ] = None,
    delegate: Annotated[
        bool,
        typer.Option(
            "--delegate",
            help="The worker runs with --mode delegate: the kubeflow.org jobs it hands the "
            "cluster's Training Operator too.",
        ),
    ] = False,
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
    if gang_scheduler is not None and gang_scheduler not in GANG_SCHEDULERS:
        raise fail(f"--gang-scheduler {gang_scheduler!r}: {' or '.join(GANG_SCHEDULERS)}")
    objects = member_rbac.manifests(namespaces, subject, gang_scheduler, delegate)
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))


@with_settings(*CREATE_TOPICS, *WORKER)
def worker(
    settings: TrainhubSettings,
    cluster: Annotated[str, typer.Option("--cluster", help="This worker's cluster name.")],
    backend: Annotated[str, typer.Option(help=spoken(BACKENDS) + ".")] = "local",
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
            help="Let pods ask for privileged, hostPath, hostNetwork, hostPID, hostIPC or "
            "hostPorts here on top of --pod-security (repeatable; refused by default).",
        ),
    ] = None,
    pod_security: Annotated[
        str,
        typer.Option(
            "--pod-security",
            help="The cluster's Pod Security Standards level: privileged, baseline or "
            "restricted, checked as Kubernetes Pod Security admission checks it.",
        ),
    ] = "baseline",
) -> None:
    """Run one cluster's worker: create the pods of the jobs the hub assigns to it."""
    require_bootstrap(settings)
    try:
        policy = ClusterPolicy.allowing(allow or [], pod_security_level(pod_security))
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
            gang_scheduling=settings.worker_config(cluster).gang_scheduling,
            delegate=settings.mode == "delegate",
            managed_by=settings.delegate_managed_by,
            pvc_dir=settings.local_pvc_dir,
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
