"""The CLI as a user runs it: a real `trainhub` process, its output and exit code."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.cli import run_trainhub
from tests.helpers import jax_job

DATA = Path(__file__).resolve().parents[1] / "data" / "kubeflow"


def trainhub(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_trainhub(*args, timeout=timeout)


def test_render_writes_documents_only() -> None:
    result = trainhub("render", str(DATA / "jax-simple.yaml"), "-o", "text")
    assert result.returncode == 2  # a usage error: there is no table of manifests
    assert "'text' is not one of" in result.stderr, result.stderr


def test_render_json_lists_pods_and_headless_services() -> None:
    result = trainhub("render", str(DATA / "jax-simple.yaml"), "-o", "json")
    assert result.returncode == 0, result.stderr
    objects = json.loads(result.stdout)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == ["Pod", "Pod", "Service", "Service"]
    pods = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Pod"}
    worker1 = pods["jaxjob-simple-worker-1"]
    env = {e["name"]: e["value"] for e in worker1["spec"]["containers"][0]["env"]}
    assert env == {
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_ADDRESS": "jaxjob-simple-worker-0",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "2",
        "PROCESS_ID": "1",
    }
    assert (
        pods["jaxjob-simple-worker-0"]["metadata"]["labels"]["training.kubeflow.org/job-role"]
        == "master"
    )
    assert "training.kubeflow.org/job-role" not in worker1["metadata"]["labels"]
    services = [o for o in objects if o["kind"] == "Service"]
    assert all(s["spec"]["clusterIP"] == "None" for s in services)
    assert worker1["spec"]["containers"][0]["ports"] == [
        {"name": "jaxjob-port", "containerPort": 6666}
    ]


def test_render_yaml_is_a_list() -> None:
    result = trainhub("render", str(DATA / "jax-simple.yaml"))
    assert result.returncode == 0, result.stderr
    assert isinstance(yaml.safe_load(result.stdout), list)


def test_render_bad_job_exits_nonzero_with_the_reason(tmp_path: Path) -> None:
    job = tmp_path / "mx.yaml"
    job.write_text(yaml.safe_dump(jax_job("old") | {"kind": "MXJob"}))
    result = trainhub("render", str(job))
    assert result.returncode == 1
    assert "MXJob was removed" in result.stderr


def test_plan_json_explains_every_cluster(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(jax_job("plan-me", workers=2, cpu="3")))
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {
                        "name": "small",
                        "healthy": True,
                        "nodes": [
                            {"name": f"s{i}", "allocatable": {"cpu": "2", "memory": "8Gi"}}
                            for i in range(4)
                        ],
                    },
                    {
                        "name": "big",
                        "healthy": True,
                        "nodes": [
                            {
                                "name": "b0",
                                "allocatable": {"cpu": "16", "memory": "64Gi"},
                                "requested": {"cpu": "4"},
                            },
                        ],
                    },
                    {
                        "name": "down",
                        "healthy": False,
                        "nodes": [
                            {"name": "d0", "allocatable": {"cpu": "16", "memory": "64Gi"}},
                        ],
                    },
                ]
            }
        )
    )
    result = trainhub("plan", str(job), "--clusters", str(clusters), "-o", "json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["chosen"] == "big"
    rows = {c["name"]: c for c in plan["clusters"]}
    assert set(rows) == {"small", "big", "down"}
    assert rows["big"]["feasible"] and rows["big"]["score"] > 0
    assert not rows["small"]["feasible"] and "cpu" in rows["small"]["reason"]
    assert not rows["down"]["feasible"] and "unhealthy" in rows["down"]["reason"]


def test_up_sim_exits_zero_only_when_all_succeed(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(jax_job("good", workers=2)))
    bad.write_text(yaml.safe_dump(jax_job("bad", workers=1, exit_code="2")))
    ok = trainhub("up", "--backend", "sim", "--exit-on-finish", str(good))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Succeeded" in ok.stdout and "score" in ok.stdout
    failed = trainhub("up", "--backend", "sim", "--exit-on-finish", str(good), str(bad))
    assert failed.returncode == 1
    assert "Failed" in failed.stdout


def test_up_on_sim_keeps_each_pods_log_in_the_logs_dir(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(jax_job("logged", workers=2)))
    logs = tmp_path / "logs"
    args = ("up", "--backend", "sim", "--exit-on-finish", "--no-live", "--cluster", "east")
    result = trainhub(*args, "--logs-dir", str(logs), str(job))
    assert result.returncode == 0, result.stdout + result.stderr
    kept = sorted(p.relative_to(logs).as_posix() for p in logs.rglob("*.log"))
    assert kept == ["east/default_logged-worker-0.log", "east/default_logged-worker-1.log"]
    assert (logs / "east" / "default_logged-worker-1.log").read_text() == (
        "[sim] logged-worker-1 is Running\n[sim] logged-worker-1 is Succeeded (exit code 0)\n"
    )


def test_up_refuses_malformed_yaml(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [oops\n")
    result = trainhub("up", "--backend", "sim", "--exit-on-finish", str(broken))
    assert result.returncode == 1
    assert "not valid YAML or JSON" in result.stderr


def test_up_refuses_nameless_and_repeated_jobs_before_starting(tmp_path: Path) -> None:
    nameless = jax_job("x", workers=1)
    del nameless["metadata"]["name"]
    twice = tmp_path / "twice.yaml"
    twice.write_text(yaml.safe_dump_all([jax_job("dup", workers=1)] * 2))
    cases = (
        (nameless, "a JAXJob document has no valid metadata.name"),
        (None, "job default/dup appears twice in the files"),
    )
    for document, message in cases:
        path = twice
        if document is not None:
            path = tmp_path / "nameless.yaml"
            path.write_text(yaml.safe_dump(document))
        for live in ("--live", "--no-live"):
            result = trainhub("up", "--backend", "sim", "--exit-on-finish", live, str(path))
            assert result.returncode == 1, result.stdout + result.stderr
            assert message in result.stderr and "Traceback" not in result.stderr


def test_up_ends_on_a_job_held_suspended(tmp_path: Path) -> None:
    # On the in-memory bus nothing could ever resume it: --exit-on-finish must not wait.
    held = jax_job("held", workers=1)
    held["spec"]["runPolicy"]["suspend"] = True
    path = tmp_path / "held.yaml"
    path.write_text(yaml.safe_dump(held))
    result = trainhub("up", "--backend", "sim", "--exit-on-finish", str(path), timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Suspended" in result.stdout and "nothing can resume it" in result.stdout


def test_up_and_render_read_unusual_files(tmp_path: Path) -> None:
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)))
    for command in ("render", "up"):
        args = ("up", "--backend", "sim", "--exit-on-finish") if command == "up" else (command,)
        result = trainhub(*args, str(binary))
        assert result.returncode == 1
        assert "weights.bin: not UTF-8 text" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_render_and_plan_refuse_what_the_hub_would_reject_anyway(tmp_path: Path) -> None:
    job = jax_job("garbage", workers=1)
    job["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": "garbage"
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump({"clusters": [{"name": "a"}]}))
    for args in (("render", str(path)), ("plan", str(path), "--clusters", str(clusters))):
        result = trainhub(*args)
        assert result.returncode == 1, result.stdout
        assert "nodeAffinity: must be a mapping" in result.stderr


def test_render_and_plan_show_every_good_job_and_name_each_bad_document(tmp_path: Path) -> None:
    unknown = jax_job("odd", workers=1) | {"kind": "FooJob"}
    broken = jax_job("broken", workers=1)
    broken["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] = -2
    path = tmp_path / "several.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [jax_job("first", workers=2), unknown, broken, jax_job("last", workers=1)]
        )
    )
    clusters = tmp_path / "clusters.yaml"
    node = {"name": "n0", "allocatable": {"cpu": "16", "memory": "64Gi"}}
    clusters.write_text(yaml.safe_dump({"clusters": [{"name": "a", "nodes": [node]}]}))
    missing = tmp_path / "missing.yaml"

    rendered = trainhub("render", str(path), "-o", "json")
    assert rendered.returncode == 1
    pods = sorted(o["metadata"]["name"] for o in json.loads(rendered.stdout) if o["kind"] == "Pod")
    assert pods == ["first-worker-0", "first-worker-1", "last-worker-0"]
    problems = rendered.stderr.strip().splitlines()
    assert len(problems) == 2, rendered.stderr
    assert f"{path}, document 2 (FooJob default/odd)" in problems[0]
    assert "unknown kind 'FooJob'" in problems[0]
    assert f"{path}, document 3 (JAXJob default/broken)" in problems[1]
    assert "replicas" in problems[1]

    planned = trainhub("plan", str(missing), str(path), "--clusters", str(clusters), "-o", "json")
    assert planned.returncode == 1
    assert [p["job"] for p in json.loads(planned.stdout)] == ["default/first", "default/last"]
    assert f"{missing}: No such file or directory" in planned.stderr
    assert "document 2 (FooJob default/odd)" in planned.stderr
    assert "document 3 (JAXJob default/broken)" in planned.stderr

    only_bad = tmp_path / "bad.yaml"
    only_bad.write_text(yaml.safe_dump(unknown))
    nothing = trainhub("render", str(only_bad))
    assert nothing.returncode == 1 and nothing.stdout == ""
    assert f"{only_bad} (FooJob default/odd): kind: unknown kind" in nothing.stderr


def test_up_says_a_rejection_once(tmp_path: Path) -> None:
    bad = jax_job("negative", workers=1)
    container = bad["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "-1"}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    args = ("up", "--backend", "sim", "--no-live", "--exit-on-finish", str(path))
    quiet = trainhub(*args)
    assert quiet.returncode == 1
    assert quiet.stdout.count("quantity must not be negative") == 1  # the Rejected line
    assert "WARNING" not in quiet.stderr, quiet.stderr
    verbose = trainhub("-v", *args)  # the hub's own warnings are still there when asked for
    assert "rejected invalid job" in verbose.stderr and "dead-lettered" in verbose.stderr


def test_submit_names_each_bad_document_and_sends_none(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    unknown = {"apiVersion": "kubeflow.org/v1", "kind": "FooJob", "metadata": {"name": "foo"}}
    jobs.write_text(yaml.safe_dump_all([jax_job("fine", workers=1), unknown]))
    # An unreachable broker: refused before connecting, or this would wait out its retries.
    result = trainhub("submit", str(jobs), "--bootstrap", "127.0.0.1:1", timeout=30)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{jobs}, document 2 (FooJob default/foo): kind: unknown kind 'FooJob'" in result.stderr
    assert "submitted" not in result.stdout


def _unmanaged(name: str) -> dict[str, object]:
    """A stock Kubeflow document: no runPolicy.managedBy."""
    document = jax_job(name, workers=1, managed=False)
    del document["spec"]["runPolicy"]
    return document


def test_up_runs_a_stock_kubeflow_document_and_names_each_job_that_did_not_succeed(
    tmp_path: Path,
) -> None:
    stock = tmp_path / "stock.yaml"
    stock.write_text(yaml.safe_dump(_unmanaged("stock")))
    ran = trainhub("up", "--backend", "sim", "--no-live", "--exit-on-finish", str(stock))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Succeeded" in ran.stdout and "Skipped" not in ran.stdout
    # Without the default: warned of at once, Skipped by the hub, and named at the end.
    failing = tmp_path / "failing.yaml"
    failing.write_text(yaml.safe_dump(jax_job("failing", workers=1, exit_code="3")))
    args = ("up", "--backend", "sim", "--no-live", "--exit-on-finish", "--no-default-managed-by")
    left = trainhub(*args, str(stock), str(failing))
    assert left.returncode == 1, left.stdout + left.stderr
    out = " ".join(left.stdout.split())  # rich wraps long lines
    assert "warning: default/stock: runPolicy.managedBy is unset" in out
    assert "default/stock: Skipped (" in out
    assert "default/failing: Failed (" in out
    assert "some jobs did not succeed" in out


def test_submit_reads_stdin_and_names_it_in_problems() -> None:
    broken = jax_job("broken", workers=1)
    broken["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] = "two"
    result = run_trainhub(
        "submit", "-", "--bootstrap", "127.0.0.1:1", stdin=yaml.safe_dump(broken), timeout=30
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "<stdin> (JAXJob default/broken):" in result.stderr, result.stderr
    assert "submitted" not in result.stdout
