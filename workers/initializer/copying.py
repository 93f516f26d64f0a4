"""A local path (`file://`, a plain path, or a `pvc://` claim's mounted path) put under the
workspace: a directory's contents, or a file by its name."""

from __future__ import annotations

import shutil
from pathlib import Path

from workers.initializer.storage_uri import StorageUriError


def copy_into(source: Path, target: Path, uri: str) -> Path:
    """Copy `source` into the directory `target` (made if missing); what was copied."""
    if not source.exists():
        raise StorageUriError(f"cannot fetch {uri}: {source} does not exist")
    target.mkdir(parents=True, exist_ok=True)
    try:
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
            return target
        placed = target / source.name
        shutil.copy2(source, placed)
        return placed
    except OSError as exc:
        raise StorageUriError(f"cannot fetch {uri}: copying {source} failed: {exc}") from None
