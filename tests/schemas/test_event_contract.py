"""The published event contract (docs/events.md, docs/schemas/) is what the models say."""

from __future__ import annotations

import json
from pathlib import Path

from bus.topics import Topics
from schemas.event_contract import EVENTS, contract_files, main, stale_files
from schemas.events import EventType

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_checked_in_contract_is_the_one_the_models_generate() -> None:
    stale = stale_files(DOCS)
    assert not stale, (
        f"out of date: {', '.join(stale)}; regenerate with `python -m schemas.event_contract`"
    )


def test_every_event_type_is_in_the_contract_once() -> None:
    declared = {v for k, v in vars(EventType).items() if k.isupper()}
    listed = [spec.type for spec in EVENTS]
    assert sorted(listed) == sorted(declared)


def test_topics_named_in_the_contract_are_the_bus_topics() -> None:
    topics = Topics(prefix="<prefix>")
    known = {
        topics.jobs,
        topics.status,
        topics.clusters,
        topics.logs,
        topics.runtimes,
        topics.assignments("<cluster>"),
        topics.reports("<cluster>"),
    }
    named = {route.topic for spec in EVENTS for route in spec.routes}
    assert named <= known, named - known


def test_schemas_are_json_and_name_their_event_type(tmp_path: Path) -> None:
    files = contract_files()
    for spec in EVENTS:
        schema = json.loads(files[f"schemas/{spec.schema_file}"])
        assert schema["title"] == spec.type
        assert schema["type"] == "object"
        assert f"## {spec.type}" in files["events.md"]
    assert json.loads(files["schemas/jobs/PyTorchJob.json"])["title"].endswith("PyTorchJob")
    # The generator writes what --check then finds current.
    assert main([str(tmp_path)]) == 0
    assert main(["--check", str(tmp_path)]) == 0
    (tmp_path / "events.md").write_text("edited by hand\n")
    assert main(["--check", str(tmp_path)]) == 1
