"""`trainhub plan` decides as the hub would, with the hub's placement settings: scoring
weights, priority classes and queue limits from --config or TRAINHUB_PLACEMENT, cluster
namespaces and pod policy from the clusters file."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.cli import run_trainhub
from tests.helpers import jax_job


def trainhub(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRAINHUB_")}
    return run_trainhub(*args, env={**clean, **(env or {})})


def write(path: Path, *documents: Any) -> Path:
    path.write_text(yaml.safe_dump_all(documents))
    return path


def snapshot(name: str, cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
    requested = extra.pop("requested", {})
    node = {"name": f"{name}-0", "allocatable": {"cpu": cpu, "memory": memory}}
    return {"name": name, "nodes": [{**node, "requested": requested}], **extra}


def plan_json(*args: str, env: dict[str, str] | None = None) -> Any:
    result = trainhub("plan", *args, "-o", "json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def with_policy(document: dict[str, Any], **policy: str) -> dict[str, Any]:
    document["spec"]["runPolicy"]["schedulingPolicy"] = policy
    return document


def test_a_packing_weight_changes_the_choice(tmp_path: Path) -> None:
    job = write(tmp_path / "job.yaml", jax_job("small", workers=1, cpu="2", memory="1Gi"))
    clusters = write(
        tmp_path / "clusters.yaml",
        {
            "clusters": [
                snapshot("roomy", "16", "64Gi"),
                snapshot("busy", "8", "32Gi", requested={"cpu": "5", "memory": "20Gi"}),
            ]
        },
    )
    spread = plan_json(str(job), "--clusters", str(clusters))
    assert spread["chosen"] == "roomy" and spread["job"] == "default/small"
    assert {c["name"]: set(c["policies"]) for c in spread["clusters"]} == {
        "roomy": {"least-allocated"},
        "busy": {"least-allocated"},
    }

    config = write(tmp_path / "hub.yaml", {"placement": {"scoring": {"most-allocated": 1}}})
    packed = plan_json(str(job), "--clusters", str(clusters), "--config", str(config))
    assert packed["chosen"] == "busy"
    scores = {c["name"]: c["score"] for c in packed["clusters"]}
    assert scores["busy"] > scores["roomy"]
    assert all(set(c["policies"]) == {"most-allocated"} for c in packed["clusters"])

    from_env = plan_json(
        str(job),
        "--clusters",
        str(clusters),
        env={"TRAINHUB_PLACEMENT": json.dumps({"scoring": {"most-allocated": 1}})},
    )
    assert from_env["chosen"] == "busy"

    shown = trainhub("plan", str(job), "--clusters", str(clusters), "--config", str(config))
    assert shown.returncode == 0, shown.stderr
    assert "scoring: most-allocated=1" in shown.stdout
    assert "chosen: busy" in shown.stdout


def test_priority_classes_decide_who_gets_the_room(tmp_path: Path) -> None:
    jobs = write(
        tmp_path / "jobs.yaml",
        jax_job("early", workers=1, cpu="3"),
        with_policy(jax_job("urgent", workers=1, cpu="3"), priorityClass="high"),
    )
    clusters = write(tmp_path / "clusters.yaml", {"clusters": [snapshot("one", "4", "8Gi")]})
    plain = plan_json(str(jobs), "--clusters", str(clusters))
    assert [(p["job"], p["chosen"]) for p in plain] == [
        ("default/early", "one"),
        ("default/urgent", None),
    ]
    assert "cpu" in plain[1]["clusters"][0]["reason"]  # the first job took the room

    config = write(tmp_path / "hub.yaml", {"placement": {"priority_classes": {"high": 100}}})
    ranked = plan_json(str(jobs), "--clusters", str(clusters), "--config", str(config))
    assert [(p["job"], p["priority"], p["chosen"]) for p in ranked] == [
        ("default/urgent", 100, "one"),
        ("default/early", 0, None),
    ]


def test_queue_limits_hold_jobs_back(tmp_path: Path) -> None:
    jobs = write(
        tmp_path / "jobs.yaml",
        *(with_policy(jax_job(f"r{i}", workers=1), queue="research") for i in range(3)),
    )
    clusters = write(tmp_path / "clusters.yaml", {"clusters": [snapshot("big", "64", "256Gi")]})
    config = write(tmp_path / "hub.yaml", {"placement": {"queue_limits": {"research": 2}}})
    planned = plan_json(str(jobs), "--clusters", str(clusters), "--config", str(config))
    assert [p["chosen"] for p in planned] == ["big", "big", None]
    assert planned[2]["queue"] == "research" and "at its limit of 2" in planned[2]["held"]


def test_cluster_namespaces_and_pod_policy_come_from_the_clusters_file(tmp_path: Path) -> None:
    job = jax_job("priv", workers=1, namespace="team-b")
    job["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "securityContext"
    ] = {"privileged": True}
    clusters = write(
        tmp_path / "clusters.yaml",
        {
            "clusters": [
                snapshot("team-a-only", "8", "16Gi", namespaces=["team-a"]),
                snapshot("strict", "8", "16Gi"),
                snapshot("lenient", "8", "16Gi", policy={"allowPrivileged": True}),
            ]
        },
    )
    planned = plan_json(str(write(tmp_path / "job.yaml", job)), "--clusters", str(clusters))
    assert planned["chosen"] == "lenient"
    reasons = {c["name"]: c["reason"] for c in planned["clusters"]}
    assert "namespace 'team-b' is not allowed" in reasons["team-a-only"]
    assert "privileged" in reasons["strict"]


def test_bad_placement_settings_are_a_usage_error(tmp_path: Path) -> None:
    job = write(tmp_path / "job.yaml", jax_job("j", workers=1))
    clusters = write(tmp_path / "clusters.yaml", {"clusters": [snapshot("c", "4", "8Gi")]})
    config = write(tmp_path / "hub.yaml", {"placement": {"scoring": {"tightest": 1}}})
    result = trainhub("plan", str(job), "--clusters", str(clusters), "--config", str(config))
    assert result.returncode == 2
    assert "unknown scoring policies ['tightest']" in result.stderr


def test_plan_without_clusters_or_a_broker_says_where_they_come_from(tmp_path: Path) -> None:
    job = write(tmp_path / "job.yaml", jax_job("j", workers=1))
    result = trainhub("plan", str(job))
    assert result.returncode == 2
    assert "plan needs the clusters: --clusters FILE, or --bootstrap HOST:PORT" in result.stderr


def test_up_places_with_the_same_settings(tmp_path: Path) -> None:
    job = write(tmp_path / "job.yaml", jax_job("j", workers=1, cpu="2", duration="0.2s"))
    config = write(tmp_path / "hub.yaml", {"placement": {"scoring": {"most-allocated": 1}}})
    clusters = ["--cluster", "big:cpu=16,memory=64Gi", "--cluster", "small:cpu=4,memory=8Gi"]
    for extra, chosen in (([], "big"), (["--config", str(config)], "small")):
        result = trainhub(
            "up", "--backend", "sim", "--exit-on-finish", "--no-live", *clusters, *extra, str(job)
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert re.search(rf"default/j Assigned on {chosen}\b", result.stdout), result.stdout


def test_jobs_the_hub_would_not_place_say_why(tmp_path: Path) -> None:
    clusters = write(tmp_path / "clusters.yaml", {"clusters": [snapshot("a", "8", "16Gi")]})
    other = jax_job("other", workers=1, managed=False)
    held = jax_job("held", workers=1)
    held["spec"]["runPolicy"]["suspend"] = True
    jobs = write(tmp_path / "jobs.yaml", other, held, jax_job("placed", workers=1))
    planned = {p["job"]: p for p in plan_json(str(jobs), "--clusters", str(clusters))}
    assert planned["default/placed"]["chosen"] == "a"
    assert planned["default/other"]["chosen"] is None
    assert "the hub leaves this job alone" in planned["default/other"]["held"]
    assert planned["default/held"]["chosen"] is None
    assert "holds it until it is resumed" in planned["default/held"]["held"]


def test_a_clusters_file_that_says_two_things_at_once_is_refused(tmp_path: Path) -> None:
    job = write(tmp_path / "job.yaml", jax_job("j", workers=1))
    twice = {"clusters": [snapshot("a", "4", "8Gi"), snapshot("a", "8", "8Gi")]}
    two_nodes = snapshot("b", "4", "8Gi")
    two_nodes["nodes"] *= 2
    listed = [snapshot("c", "4", "8Gi")]  # the list without its `clusters:` mapping
    ports = snapshot("d", "4", "8Gi")
    ports["nodes"][0]["hostPorts"] = ["TCP/99999"]
    cases: list[tuple[Any, str]] = [
        (twice, "clusters: the name 'a' is given twice"),
        ({"clusters": [two_nodes]}, "clusters[0].nodes: the name 'b-0' is given twice"),
        (listed, "expected one mapping with a `clusters` list"),
        ({"clusters": [ports]}, "'TCP/99999' is not PROTOCOL/PORT"),
    ]
    for index, (content, message) in enumerate(cases):
        path = tmp_path / f"clusters-{index}.yaml"
        path.write_text(yaml.safe_dump(content))
        result = trainhub("plan", str(job), "--clusters", str(path))
        assert result.returncode == 1, (message, result.stdout)
        assert message in result.stderr, result.stderr


def test_a_trainjob_is_planned_by_every_node_of_its_runtime(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    job = root / "examples/trainjob-torch-digits/trainjob.yaml"
    clusters = write(
        tmp_path / "clusters.yaml",
        {"clusters": [snapshot("roomy", "16", "64Gi"), snapshot("one-cpu", "1", "64Gi")]},
    )
    plan = plan_json(str(job), "--clusters", str(clusters))
    assert plan["chosen"] == "roomy" and plan["job"] == "default/torch-digits"
    (small,) = [c for c in plan["clusters"] if c["name"] == "one-cpu"]
    # numNodes 2 x 1 CPU: the gang of two node pods does not fit one CPU.
    assert "room for 1 of 2 node pods" in small["reason"]
