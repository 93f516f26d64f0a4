"""A job's priority as the hub resolved it (`placement.priority_classes`) travels on its
statuses and is shown by `get -o wide|json|yaml` and `describe`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import yaml

from schemas.status import JobPhase
from tests.helpers import jax_job
from trainhub.cli_get_jobs import GetOutput, print_jobs
from trainhub.cli_jobs import describe_text
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.sdk import AsyncTrainHubClient
from trainhub.sdk_view import TrainHubJob
from trainhub.settings import TrainhubSettings
from workers.cluster_spec import parse_cluster_spec

CLASSES = {"high": 100, "low": -5}


def _job(name: str, priority_class: str | None) -> dict[str, Any]:
    document = jax_job(name, workers=1)
    policy = document["spec"].setdefault("runPolicy", {})
    # Held by the hub (the statuses are all the hub's), but for a class it refuses at once.
    policy["suspend"] = priority_class in CLASSES or priority_class is None
    if priority_class is not None:
        policy["schedulingPolicy"] = {"priorityClass": priority_class}
    return document


@pytest.fixture
async def jobs() -> AsyncIterator[dict[str, TrainHubJob]]:
    """high, low, one naming no class, and one naming a class the hub does not know."""
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("east:cpu=4,memory=8Gi")],
        backend="sim",
        heartbeat_interval=0.2,
        settings=TrainhubSettings(placement={"priority_classes": CLASSES}),
    )
    async with Embedded(options) as system:
        wanted = {"urgent": "high", "batch": "low", "plain": None, "typo": "hihg"}
        uids = [await system.submit(_job(name, c)) for name, c in wanted.items()]
        waiting = set(uids)
        async with asyncio.timeout(20):
            async for update in system.updates(uids):
                if update.phase in (JobPhase.SUSPENDED, JobPhase.REJECTED):
                    waiting.discard(update.uid)
                    if not waiting:
                        break
        async with AsyncTrainHubClient(settings=TrainhubSettings(), bus=system.bus) as client:
            listed = await client.list_jobs()
        yield {j.name or "": j for j in listed}


@pytest.fixture
def shown(capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """What a printing function writes to stdout (tables through rich, -o json|yaml plain)."""

    def run(print_it: Callable[..., None], *args: Any, **kwargs: Any) -> str:
        capsys.readouterr()
        print_it(*args, **kwargs)
        return capsys.readouterr().out

    return run


async def test_the_status_carries_class_and_number(jobs: dict[str, TrainHubJob]) -> None:
    got = {n: (j.priority_class, j.priority) for n, j in jobs.items()}
    assert got == {
        "urgent": ("high", 100),
        "batch": ("low", -5),
        "plain": (None, 0),
        "typo": ("hihg", None),
    }
    assert jobs["typo"].phase == JobPhase.REJECTED
    assert "unknown class 'hihg'; the hub knows high (100), low (-5)" in (
        jobs["typo"].message or ""
    )


async def test_get_wide_has_a_priority_column(
    jobs: dict[str, TrainHubJob], shown: Callable[..., str]
) -> None:
    ordered = [jobs[n] for n in ("urgent", "batch", "plain", "typo")]
    lines = shown(print_jobs, ordered, GetOutput.wide, one=False).splitlines()
    header = lines[0].split()
    assert "PRIORITY" in header
    column = header.index("PRIORITY")
    cells = {line.split()[1]: line.split()[column : column + 2] for line in lines[1:]}
    assert cells["urgent"] == ["100", "(high)"]
    assert cells["batch"] == ["-5", "(low)"]
    assert cells["plain"][0] == "0"
    assert cells["typo"] == ["?", "(hihg)"]
    # The narrow table stays as it was.
    assert "PRIORITY" not in shown(print_jobs, ordered, GetOutput.text, one=False)


async def test_get_json_and_yaml_give_class_and_number(
    jobs: dict[str, TrainHubJob], shown: Callable[..., str]
) -> None:
    listed = json.loads(
        shown(print_jobs, [jobs["urgent"], jobs["plain"]], GetOutput.json, one=False)
    )
    views = [item["status"]["trainhub"] for item in listed["items"]]
    assert [(s["priorityClass"], s["priority"]) for s in views] == [("high", 100), (None, 0)]
    one = yaml.safe_load(shown(print_jobs, [jobs["batch"]], GetOutput.yaml, one=True))
    assert (one["status"]["trainhub"]["priorityClass"], one["status"]["trainhub"]["priority"]) == (
        "low",
        -5,
    )


async def test_describe_shows_the_class_and_what_it_resolved_to(
    jobs: dict[str, TrainHubJob], shown: Callable[..., str]
) -> None:
    def priority_line(name: str) -> str:
        text = shown(describe_text, jobs[name])
        return next(line for line in text.splitlines() if line.startswith("Priority:"))

    assert priority_line("urgent").split(None, 1)[1] == "100 (priorityClass high)"
    assert priority_line("plain").split(None, 1)[1] == "0 (no priorityClass: the default)"
    assert priority_line("typo").split(None, 1)[1] == "hihg (not a class the hub knows)"
