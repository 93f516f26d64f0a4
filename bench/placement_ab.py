"""Placement decisions/s of the working tree against an earlier revision, runs alternated.

This machine is a shared VM whose speed drifts by 15% between runs minutes apart and by 2x
between days, so one run of `bench.placement` before a change and one after prove nothing.
This runs both sides in turns (A, B, A, B, ...), each in a fresh process on the same
decisions, and reports every run and the medians.

Usage: python -m bench.placement_ab REV [--runs 5] [--clusters 100] [--nodes 50] [--jobs 10000]
REV is checked out into a temporary git worktree, removed afterwards. Both sides run as
plain Python (TRAINHUB_NATIVE=0): compiled builds are made per source version.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_RUN = (
    "import contextlib, io, json, sys; import bench.placement as b\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    result = b.run(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))\n"
    "print(json.dumps(result))\n"
)


def _rate(tree: Path, clusters: int, nodes: int, jobs: int) -> float:
    # -P and the tree first on the path: the revision's modules, not the installed ones.
    done = subprocess.run(
        [sys.executable, "-P", "-c", _RUN, str(clusters), str(nodes), str(jobs)],
        cwd=tree,
        # Plain Python on both sides: a compiled build exists for one tree at most.
        env={"PYTHONPATH": str(tree), "PATH": "", "TRAINHUB_NATIVE": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(done.stdout.splitlines()[-1])["decisions_per_s"])


def compare(revision: str, runs: int, clusters: int, nodes: int, jobs: int) -> dict[str, Any]:
    rates: dict[str, list[float]] = {revision: [], "working tree": []}
    with tempfile.TemporaryDirectory(prefix="placement-ab-") as folder:
        base = Path(folder) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), revision],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            for _ in range(runs):
                rates[revision].append(_rate(base, clusters, nodes, jobs))
                rates["working tree"].append(_rate(ROOT, clusters, nodes, jobs))
                print(
                    f"{revision}: {rates[revision][-1]:,.0f}/s  "
                    f"working tree: {rates['working tree'][-1]:,.0f}/s",
                    flush=True,
                )
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False
            )
    medians = {side: statistics.median(values) for side, values in rates.items()}
    return {
        "clusters": clusters,
        "nodes_per_cluster": nodes,
        "jobs": jobs,
        "decisions_per_s": rates,
        "median": medians,
        "ratio": round(medians["working tree"] / medians[revision], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    report = compare(args.revision, args.runs, args.clusters, args.nodes, args.jobs)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
