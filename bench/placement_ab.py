"""Placement of the working tree against an earlier revision: decisions/s alternated, or
instructions per decision.

This machine is a shared VM whose speed drifts by 15% between runs minutes apart and by 2x
between days, so one run of `bench.placement` before a change and one after prove nothing.
By default this runs both sides in turns (A, B, A, B, ...), each in a fresh process on the
same decisions, and reports every run and the medians; both sides run as plain Python
(TRAINHUB_NATIVE=0), since compiled builds are made per source version.

`--instructions` counts instead, under valgrind's callgrind, the instructions each side's
compiled placement (built first, as `make native` does) executes per decision, inside
`Placer.plan` and the reservations' reserve, release and reconcile only; the decisions run on
`bench.placement`'s virtual clock with a fixed hash seed, so the count is the same from run
to run (to 0.1%) and one run per side is enough. Slow (valgrind runs some 50 times slower):
about ten minutes per side at the default 20,000 jobs, the bench's own count at 100 clusters
(with fewer, the first packing of each job shape on each cluster weighs too much). Needs
valgrind (Debian: `apt-get install valgrind`) and a C compiler.

Usage: python -m bench.placement_ab REV [--runs 5] [--clusters 100] [--nodes 50] [--jobs N]
       [--instructions]
REV is checked out into a temporary git worktree, removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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


_COUNT = (
    "import contextlib, importlib.util, io, sys\n"
    "from dispatcher import native\n"
    "if not native.active(): sys.exit('placement is not compiled in ' + sys.argv[4])\n"
    "spec = importlib.util.spec_from_file_location('placement_driver', sys.argv[5])\n"
    "b = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(b)\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    b.run(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), virtual_rate=3000.0)\n"
)
"""Both sides run the working tree's driver (bench/placement.py), on their own placement."""
_COUNTED = (
    "CPyPy_placement___Placer___plan",
    "CPyPy_reservation_versions___VersionedReservations___reserve",
    "CPyPy_reservation_versions___VersionedReservations___release",
    "CPyPy_reservation_versions___VersionedReservations___reconcile",
)
"""The compiled entry points whose instructions (and their callees') are counted."""


def _instructions(tree: Path, clusters: int, nodes: int, jobs: int) -> int:
    """Instructions per decision of `tree`'s compiled placement."""
    env = {"PYTHONPATH": str(tree), "PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0"}
    build = [sys.executable, "-P", "-m", "dispatcher.build_native"]
    subprocess.run(build, cwd=tree, env=env, check=True, capture_output=True)
    with tempfile.TemporaryDirectory(prefix="placement-count-") as folder:
        out = Path(folder) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        command += [f"--toggle-collect={name}" for name in _COUNTED]
        command += [sys.executable, "-P", "-c", _COUNT, str(clusters), str(nodes), str(jobs)]
        command += [str(tree), str(ROOT / "bench" / "placement.py")]
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"counting failed in {tree}:\n{done.stderr[-2000:]}")
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1]) // jobs
    raise SystemExit(f"callgrind wrote no summary for {tree}")


@contextmanager
def _checked_out(revision: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="placement-ab-") as folder:
        base = Path(folder) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), revision],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            yield base
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False
            )


def count(revision: str, clusters: int, nodes: int, jobs: int) -> dict[str, Any]:
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (Debian: apt-get install valgrind)")
    with _checked_out(revision) as base:
        before = _instructions(base, clusters, nodes, jobs)
        print(f"{revision}: {before:,} instructions per decision", flush=True)
    after = _instructions(ROOT, clusters, nodes, jobs)
    print(f"working tree: {after:,} instructions per decision", flush=True)
    return {
        "clusters": clusters,
        "nodes_per_cluster": nodes,
        "jobs": jobs,
        "instructions_per_decision": {revision: before, "working tree": after},
        "ratio": round(after / before, 4),
    }


def compare(revision: str, runs: int, clusters: int, nodes: int, jobs: int) -> dict[str, Any]:
    rates: dict[str, list[float]] = {revision: [], "working tree": []}
    with _checked_out(revision) as base:
        for _ in range(runs):
            rates[revision].append(_rate(base, clusters, nodes, jobs))
            rates["working tree"].append(_rate(ROOT, clusters, nodes, jobs))
            print(
                f"{revision}: {rates[revision][-1]:,.0f}/s  "
                f"working tree: {rates['working tree'][-1]:,.0f}/s",
                flush=True,
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
    parser.add_argument(
        "--jobs",
        type=int,
        help="default 10,000; with --instructions 20,000, as bench.placement decides at 100 "
        "clusters (2,000 measure mostly the first packing of each shape on each cluster)",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count compiled instructions per decision under callgrind (one run per side)",
    )
    args = parser.parse_args()
    if args.instructions:
        report = count(args.revision, args.clusters, args.nodes, args.jobs or 20_000)
    else:
        report = compare(args.revision, args.runs, args.clusters, args.nodes, args.jobs or 10_000)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
