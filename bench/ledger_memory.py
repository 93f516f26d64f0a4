"""The hub's memory per job it remembers: while the job is in flight, and once it finished.

A long-running hub keeps a record of every job it has seen (duplicates are refused by uid,
statuses are checked against the current placement). While a job is unfinished its record
holds the parsed job, its document and the placement decision (a score per cluster); once
finished, `Ledger.compact_finished` keeps only the summary. Records are built as the hub
builds them (parse, profile, plan against sim clusters of 50 nodes, reserve), the placer's
caches are dropped, and the traced memory still held by the records is divided by their count.

Usage: python -m bench.ledger_memory [--clusters 10,100,1000] [--jobs N]
Writes bench/results/ledger_memory.json: [{"clusters", "jobs", "bytes_per_job_in_flight",
"bytes_per_finished_job"}, ...].
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

from bench.placement import Fleet, job_document
from dispatcher.ledger import JobRecord, Ledger
from dispatcher.placement import Placer, VersionedReservations
from schemas.job_parsing import parse_job
from schemas.status import JobPhase

RESULTS = Path(__file__).parent / "results" / "ledger_memory.json"


def measure(clusters: int, jobs: int, seed: int = 7) -> dict[str, Any]:
    fleet = Fleet(clusters, 50)
    listed = [fleet.snapshots[name] for name in fleet.names]
    rng = random.Random(seed)
    documents = [job_document(i, rng) for i in range(jobs)]
    placer: Placer | None = Placer()
    reservations = VersionedReservations()
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    ledger = Ledger()
    for document in documents:
        job = parse_job(document)
        record = JobRecord.of(job, JobPhase.QUEUED)
        ledger.put(record)
        assert placer is not None
        placement = placer.plan(job, listed, reservations=reservations)
        record.decision = placement.decision
        record.document()  # the Queued status and the assignment carry it
        if placement.chosen is not None:
            record.assign(placement.chosen)
            reservations.reserve(placement.chosen, record.uid, placement.usage)
            reservations.release(record.uid)
    placer = None  # its caches are bounded and not per job: leave them out
    gc.collect()
    in_flight = tracemalloc.get_traced_memory()[0] - base
    for record in ledger.all():
        record.finish(JobPhase.SUCCEEDED)
    ledger.compact_finished()
    gc.collect()
    finished = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    result = {
        "clusters": clusters,
        "jobs": jobs,
        "bytes_per_job_in_flight": in_flight // jobs,
        "bytes_per_finished_job": finished // jobs,
    }
    print(
        f"{clusters:5d} clusters: {result['bytes_per_job_in_flight']:,} B per job in flight, "
        f"{result['bytes_per_finished_job']:,} B once finished",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", default="10,100,1000")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    results = [measure(int(c), args.jobs) for c in args.clusters.split(",")]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
