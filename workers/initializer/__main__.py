"""`python -m workers.initializer dataset|model`: fetch `STORAGE_URI` into /workspace/dataset
or /workspace/model, as upstream's dataset and model initializer images do; exit 1 with the
reason as the last line of the output (and the container's termination message) if not."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import get_args

from workers.initializer.fetching import fetch
from workers.initializer.storage_uri import STORAGE_URI_ENV, AssetKind, StorageUriError

TERMINATION_LOG = Path("/dev/termination-log")
"""Where the kubelet takes a container's termination message from (when it made the file)."""
USAGE = "usage: python -m workers.initializer dataset|model"


def _failed(reason: str) -> int:
    if TERMINATION_LOG.exists():
        try:
            TERMINATION_LOG.write_text(reason)
        except OSError:
            pass  # the reason is still the last line of the log
    print(reason, file=sys.stderr, flush=True)
    return 1


def main(argv: list[str]) -> int:
    logging.basicConfig(
        format="%(asctime)s %(levelname)-8s [%(filename)s:%(lineno)d] %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%SZ",
        level=logging.INFO,
    )
    kinds: tuple[AssetKind, ...] = get_args(AssetKind)
    if len(argv) != 1 or argv[0] not in kinds:
        print(USAGE, file=sys.stderr)
        return 2
    kind: AssetKind = "dataset" if argv[0] == "dataset" else "model"
    storage_uri = os.environ.get(STORAGE_URI_ENV)
    if not storage_uri:
        return _failed(f"{STORAGE_URI_ENV} env variable must be set.")
    logging.info("Starting %s initialization from %s", kind, storage_uri)
    try:
        target = fetch(kind, storage_uri, os.environ)
    except StorageUriError as exc:
        return _failed(str(exc))
    logging.info("%s has been downloaded to %s", kind.capitalize(), target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
