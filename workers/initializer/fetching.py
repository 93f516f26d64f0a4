"""Put what a STORAGE_URI names under the workspace, whatever its scheme."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from workers.initializer.copying import copy_into
from workers.initializer.downloading import Retries, download_file, file_name
from workers.initializer.huggingface import snapshot
from workers.initializer.storage_uri import (
    PVC_MOUNT_ENV,
    PVC_SOURCE_MOUNT,
    WORKSPACE_ENV,
    WORKSPACE_PATH,
    AssetKind,
    parse_storage_uri,
    target_dir,
)


def fetch(
    kind: AssetKind, storage_uri: str, env: Mapping[str, str], retries: Retries | None = None
) -> Path:
    """Fetch `storage_uri` into the `kind`'s directory of the workspace; that directory.
    StorageUriError, naming the URI, when it cannot be."""
    uri = parse_storage_uri(storage_uri)
    target = Path(target_dir(env.get(WORKSPACE_ENV) or WORKSPACE_PATH, kind))
    if uri.scheme == "file":
        copy_into(Path(uri.location), target, uri.text)
    elif uri.scheme == "pvc":
        mounted = Path(env.get(PVC_MOUNT_ENV) or PVC_SOURCE_MOUNT)
        copy_into(mounted / uri.location if uri.location else mounted, target, uri.text)
    elif uri.scheme == "http":
        download_file(uri.location, target / file_name(uri.location), retries=retries)
    else:
        snapshot(uri, kind, target, env, retries)
    return target
