"""The compiled placement core (dispatcher/native.py): used when built from these exact
sources, never otherwise, and deciding exactly as the plain Python does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dispatcher import native

ROOT = Path(__file__).resolve().parents[2]

# A fleet of mixed clusters (GPU models, zones, taints, costs, namespaces, a stale one), jobs
# of several kinds and shapes placed in turn with reservations, and heartbeats between them
# that reconcile; every decision is printed with every cluster's score or refusal.
_SCENARIO = r"""
import json, random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from dispatcher import native
from dispatcher.placement import Placer, VersionedReservations, describe
from dispatcher.placement_config import PlacementConfig
from schemas.cluster import ClusterSnapshot, NodeSnapshot, Taint
from schemas.job_parsing import parse_job

rng = random.Random(11)
now = datetime(2026, 12, 1, tzinfo=UTC)
config = PlacementConfig.from_dict({"scoring": {
    "least-allocated": 2, "gpu-model": 1, "cost": 1, "cluster-affinity": 1}})
placer = Placer(config)
book = VersionedReservations()
running = {}

def snapshot(i, sequence):
    gpu = i % 3 == 0
    nodes = []
    for n in range(6):
        name = f"c{i}-n{n}"
        used = {}
        for usage in running.get(f"c{i}", {}).values():
            for r, a in usage.get(name, {}).items():
                used[r] = used.get(r, Decimal(0)) + a
        alloc = {"cpu": Decimal(8 + 8 * (n % 2)), "memory": Decimal(32 * 2**30),
                 "pods": Decimal(20)}
        labels = {"zone": "ab"[n % 2]}
        if gpu:
            alloc["nvidia.com/gpu"] = Decimal(4)
            labels["nvidia.com/gpu.product"] = "H100" if i % 2 else "A100"
        taints = [Taint(key="dedicated", value="ml", effect="NoSchedule")] if n == 5 else []
        nodes.append(NodeSnapshot(name=name, allocatable=alloc, requested=used,
                                  labels=labels, taints=taints))
    stale = i == 7 and sequence > 3
    return ClusterSnapshot(
        name=f"c{i}", nodes=nodes, sequence=sequence,
        observedAt=now - timedelta(seconds=120 if stale else 1),
        labels={"region": "eu" if i % 2 else "us"}, cost=float(1 + i % 4),
        namespaces=None if i % 5 else ["team-a"], jobs=sorted(running.get(f"c{i}", {})))

def job(k):
    cpu = rng.choice(["500m", "1", "2", "6"])
    spec = {"containers": [{"name": "m", "image": "x", "resources": {
        "requests": {"cpu": cpu, "memory": rng.choice(["1Gi", "4Gi"])}}}]}
    if k % 4 == 0:
        spec["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
        spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
        spec["nodeSelector"] = {"nvidia.com/gpu.product": rng.choice(["H100", "A100"])}
    if k % 7 == 0:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    metadata = {"name": f"j{k}", "namespace": rng.choice(["default", "team-a"])}
    if k % 6 == 0:
        metadata["annotations"] = {"trainhub.io/preferred-cluster-labels": "region=eu"}
    kind, field, container = rng.choice(
        [("JAXJob", "jaxReplicaSpecs", "jax"), ("PyTorchJob", "pytorchReplicaSpecs", "pytorch")])
    spec["containers"][0]["name"] = container
    types = {"Worker": {"replicas": rng.randint(1, 5), "template": {"spec": spec}}}
    if kind == "PyTorchJob":
        types["Master"] = {"replicas": 1, "template": {"spec": spec}}
    return parse_job({"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": metadata,
        "spec": {"runPolicy": {"managedBy": "trainhub.io/dispatcher"}, field: types}})

clusters = [snapshot(i, 1) for i in range(12)]
decisions = []
for k in range(400):
    j = job(k)
    placed = placer.plan(j, clusters, reservations=book, now=now)
    decisions.append(describe(placed) | {"never": placed.never_fits})
    if placed.chosen is not None:
        book.reserve(placed.chosen, j.uid, placed.usage)
        running.setdefault(placed.chosen, {})[j.uid] = placed.usage
    if k % 3 == 0 and k > 30:  # the oldest job somewhere ends
        for jobs in running.values():
            if jobs:
                uid = next(iter(jobs))
                del jobs[uid]
                book.release(uid)
                break
    if k % 25 == 0:  # heartbeats
        for i in range(12):
            clusters[i] = snapshot(i, k // 25 + 2)
            book.reconcile(clusters[i])
print(json.dumps({"compiled": native.active(), "decisions": decisions}, sort_keys=True))
"""


def _decide(native_on: bool) -> dict[str, object]:
    env = {**os.environ, "TRAINHUB_NATIVE": "1" if native_on else "0"}
    done = subprocess.run(
        [sys.executable, "-c", _SCENARIO],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _built() -> bool:
    return (native.build_dir() / "complete").exists()


def test_compiled_placement_decides_exactly_as_plain_python() -> None:
    if not _built():
        pytest.skip("no compiled build of these sources (make native)")
    compiled, plain = _decide(True), _decide(False)
    assert compiled["compiled"] is True
    assert plain["compiled"] is False
    decisions = compiled["decisions"]
    assert isinstance(decisions, list) and len(decisions) == 400
    chosen = [d["chosen"] for d in decisions]
    # The scenario covers placements, waits and refusals, not one easy case.
    assert len(set(chosen) - {None}) >= 6 and None in chosen
    assert decisions == plain["decisions"]


def test_a_build_is_used_only_for_the_sources_it_was_made_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "src"
    for package in ("dispatcher", "schemas"):
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__py*"))
    monkeypatch.setattr(native, "_SOURCE_PACKAGES", (copy / "dispatcher", copy / "schemas"))
    monkeypatch.setenv("TRAINHUB_NATIVE_DIR", str(tmp_path / "builds"))
    monkeypatch.setattr(sys, "path", [*sys.path])  # activate appends the build's library
    key = native.build_key()
    assert native.build_key() == key  # stable
    # A build for these sources: activate puts it first on the package path.
    made = tmp_path / "builds" / key
    (made / "dispatcher").mkdir(parents=True)
    (made / "lib").mkdir()
    (made / "complete").write_text("")
    (made / "lib" / "group__mypyc.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    for name in native.COMPILED[:-1]:
        (made / "dispatcher" / f"{name}.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    assert not native.activate([])  # one module missing: all plain Python, not half
    last = native.COMPILED[-1]
    (made / "dispatcher" / f"{last}.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    path: list[str] = []
    assert native.activate(path)
    assert path == [str(made / "dispatcher")]
    # An edited source (here schemas, which the compiled code was checked against) has
    # another key: the old build is not used.
    edited = copy / "schemas" / "cluster.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    assert native.build_key() != key
    assert not native.activate([])
    # Switched off, even a matching build is not used.
    edited.write_text(edited.read_text().removesuffix("\n# edited\n"))
    assert native.build_key() == key
    monkeypatch.setenv("TRAINHUB_NATIVE", "0")
    assert not native.activate([])


def test_old_builds_and_abandoned_scratch_folders_are_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINHUB_NATIVE_DIR", str(tmp_path))
    now = time.time()
    builds = []
    for age, name in enumerate(("newest", "older", "older-still", "oldest")):
        build = tmp_path / name
        build.mkdir()
        (build / "complete").write_text("")
        os.utime(build, (now - age * 100, now - age * 100))
        builds.append(build)
    killed, running = tmp_path / "building-killed", tmp_path / "building-running"
    killed.mkdir()
    running.mkdir()
    os.utime(killed, (now - 7200, now - 7200))  # from a build killed two hours ago
    native._prune(keep=builds[0])
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["building-running", "newest", "older", "older-still"]
