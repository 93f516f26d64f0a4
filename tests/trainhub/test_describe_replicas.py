"""`trainhub describe job`'s replicas table: what each replica runs, as its pods will."""

from __future__ import annotations

from rich.console import Console

from schemas.job_parsing import parse_job
from tests.helpers import jax_job
from trainhub.cli_jobs import _replica_table


def _rows(document: dict[str, object]) -> list[str]:
    console = Console(width=200, record=True)
    console.print(_replica_table(parse_job(document)))
    return [line for line in console.export_text().splitlines() if "Worker" in line]


def test_an_unset_restart_policy_shows_the_kinds_default_and_the_main_container() -> None:
    document = jax_job("d")
    spec = document["spec"]["jaxReplicaSpecs"]["Worker"]
    del spec["restartPolicy"]
    containers = spec["template"]["spec"]["containers"]
    containers.insert(0, {"name": "sidecar", "image": "example/sidecar:1"})
    (row,) = _rows(document)
    # JAXJob's default is Never; the framework's container, not the sidecar, is shown.
    assert "Never" in row and "example/jax:1" in row and "sidecar" not in row
    spec["restartPolicy"] = "OnFailure"
    (row,) = _rows(document)
    assert "OnFailure" in row
