"""`trainhub runtime apply|delete` and `trainhub get runtimes`: operators' TrainJob runtimes on
the bus (the compacted runtimes topic), as kubectl applies, deletes and lists objects.

Exit codes: 0 done; 1 an invalid runtime file (nothing published); 2 usage or connection
error; 3 no such runtime on the bus."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from schemas.errors import ContractError
from schemas.job_parsing import load_documents, read_text
from schemas.trainer import AnyRuntime
from schemas.trainer_runtimes import (
    CLUSTER_RUNTIME,
    NAMESPACED_RUNTIME,
    RuntimeCatalog,
    parse_runtime,
    runtime_document,
)
from trainhub.cli_help import examples
from trainhub.cli_jobs import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    ListOutput,
    _fail,
    _with_client,
    console,
    err_console,
    print_structured,
)
from trainhub.cli_settings import READ_BUS, with_settings
from trainhub.cli_submit import read_stdin
from trainhub.sdk import AsyncTrainHubClient
from trainhub.sdk_errors import RuntimeNotFoundError
from trainhub.settings import TrainhubSettings

runtime_app = typer.Typer(
    help="Apply and delete TrainJob runtimes on the bus (as the hub's user under ACLs).",
    no_args_is_help=True,
    epilog=examples(
        "trainhub runtime apply -f my-torch.yaml",
        "trainhub runtime delete clustertrainingruntime/my-torch",
        "trainhub runtime delete trainingruntime/team-torch -n team-a",
    ),
)

_KINDS = {
    "clustertrainingruntime": CLUSTER_RUNTIME,
    "clustertrainingruntimes": CLUSTER_RUNTIME,
    "trainingruntime": NAMESPACED_RUNTIME,
    "trainingruntimes": NAMESPACED_RUNTIME,
}


def register(app: typer.Typer, get_app: typer.Typer) -> None:
    """Add `runtime apply|delete` and `get runtimes`."""
    app.add_typer(runtime_app, name="runtime")
    get_app.command(
        "runtimes",
        epilog=examples("trainhub get runtimes", "trainhub get runtimes -o yaml"),
    )(get_runtimes)


def read_runtime_files(paths: list[Path]) -> list[AnyRuntime]:
    """Every runtime of the files, each validated by upstream's rules; exit 1 naming every
    bad document (then nothing is published)."""
    texts = read_stdin(paths)
    runtimes: list[AnyRuntime] = []
    problems: list[str] = []
    for path in paths:
        origin = "<stdin>" if str(path) == "-" else str(path)
        try:
            documents = load_documents(texts.get(path) or read_text(path), origin)
        except ContractError as exc:
            problems.append(str(exc))
            continue
        if not documents:
            problems.append(f"{origin}: no runtime document found")
        for index, document in enumerate(documents, start=1):
            where = origin if len(documents) == 1 else f"{origin}, document {index}"
            try:
                runtimes.append(parse_runtime(document, where))
            except ContractError as exc:
                problems.append(str(exc))
    for problem in problems:
        err_console.print(problem, highlight=False)
    if problems:
        raise typer.Exit(1)
    return runtimes


@runtime_app.command(
    "apply", epilog=examples("trainhub runtime apply -f my-torch.yaml -f team-runtimes/")
)
@with_settings(*READ_BUS)
def apply(
    settings: TrainhubSettings,
    files: Annotated[
        list[Path],
        typer.Option(
            "-f",
            "--filename",
            help="(Cluster)TrainingRuntime YAML/JSON file, a directory of them, or - for stdin "
            "(repeatable).",
        ),
    ],
) -> None:
    """Validate runtimes by upstream's rules and publish them on the runtimes topic.

    Each replaces the runtime of its kind, namespace and name applied before, and overrides
    a shipped or --runtimes one of the same name: shipped < files < the bus. The hub uses it
    for TrainJobs placed from then on; jobs placed before keep the runtime they were placed
    with."""
    paths = [
        found
        for path in files
        for found in (
            sorted([*path.glob("*.yaml"), *path.glob("*.yml"), *path.glob("*.json")])
            if path.is_dir()
            else [path]
        )
    ]
    runtimes = read_runtime_files(paths)

    async def work(client: AsyncTrainHubClient) -> list[str]:
        return [await client.apply_runtime(runtime) for runtime in runtimes]

    _with_client(settings, work)
    for runtime in runtimes:
        console.print(f"{runtime.kind.lower()}/{_name(runtime)} applied", highlight=False)


@runtime_app.command(
    "delete",
    epilog=examples(
        "trainhub runtime delete clustertrainingruntime/my-torch",
        "trainhub runtime delete trainingruntime/team-torch -n team-a",
    ),
)
@with_settings(*READ_BUS)
def delete(
    settings: TrainhubSettings,
    runtime: Annotated[
        str, typer.Argument(metavar="KIND/NAME", help="e.g. clustertrainingruntime/my-torch")
    ],
    namespace: Annotated[
        str, typer.Option("-n", "--namespace", help="A TrainingRuntime's namespace.")
    ] = "default",
) -> None:
    """Delete a runtime applied on the bus (a tombstone on the runtimes topic); a shipped or
    --runtimes one of the same name is the one known again. Jobs already placed with it keep
    it."""
    kind_text, _, name = runtime.partition("/")
    kind = _KINDS.get(kind_text.lower())
    if kind is None or not name:
        raise _fail(
            f"KIND/NAME: clustertrainingruntime/NAME or trainingruntime/NAME (got {runtime!r})",
            EXIT_USAGE,
        )

    async def work(client: AsyncTrainHubClient) -> None:
        await client.delete_runtime(name, kind=kind, namespace=namespace)

    try:
        _with_client(settings, work)
    except RuntimeNotFoundError as exc:
        raise _fail(str(exc), EXIT_NOT_FOUND) from None
    console.print(f"{kind.lower()}/{name} deleted", highlight=False)


@with_settings(*READ_BUS)
def get_runtimes(
    settings: TrainhubSettings,
    output: Annotated[ListOutput, typer.Option("-o", "--output")] = ListOutput.text,
) -> None:
    """List the TrainJob runtimes the hub knows: shipped, from --runtimes files, and applied
    on the bus (SOURCE), the later overriding the earlier of the same name."""

    async def work(client: AsyncTrainHubClient) -> RuntimeCatalog:
        return await client.runtimes()

    entries = _with_client(settings, work).entries()
    ordered = sorted(entries, key=lambda k: (k[0] != CLUSTER_RUNTIME, k))
    if output in (ListOutput.json, ListOutput.yaml):
        items: list[dict[str, Any]] = [runtime_document(entries[key][0]) for key in ordered]
        print_structured({"apiVersion": "v1", "kind": "List", "items": items}, output.value)
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["NAME", "KIND", "POLICY", "SOURCE"]
    if output == ListOutput.wide:
        columns += ["NODES", "REPLICATED JOBS"]
    for column in columns:
        table.add_column(column)
    for key in ordered:
        found, source = entries[key]
        cells = [_name(found), found.kind, _policy(found), source]
        if output == ListOutput.wide:
            ml = found.spec.mlPolicy
            jobs = [j.name for j in found.spec.template.spec.replicatedJobs]
            cells += [str(ml.numNodes if ml and ml.numNodes else 1), ",".join(jobs)]
        table.add_row(*cells)
    console.print(table)


def _name(runtime: AnyRuntime) -> str:
    if runtime.kind == NAMESPACED_RUNTIME:
        return f"{runtime.metadata.namespace or 'default'}/{runtime.metadata.name}"
    return runtime.metadata.name


def _policy(runtime: AnyRuntime) -> str:
    ml = runtime.spec.mlPolicy
    return "torch" if ml and ml.torch else "mpi" if ml and ml.mpi else "plain"
