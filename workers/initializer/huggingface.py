"""`hf://` as upstream's initializers read it (kubeflow/trainer v2.0.0,
`pkg/initializers/{dataset,model}/huggingface.py`), fetched through the Hub's HTTP API as
`huggingface_hub.snapshot_download` does: the repository's file list, then each file.

Dataset: `hf://<owner>/<name>[/...]` is the dataset repository `<owner>/<name>` (what follows
is ignored, as upstream ignores it), every file. Model: `hf://<owner>/<name>` is the model
repository, upstream's patterns only (`*.json`, `*.safetensors`, `*.model`, less `*.msgpack`,
`*.h5`, `*.bin`). `HF_ENDPOINT` names another Hub (a mirror inside the cluster),
`HF_HUB_OFFLINE` forbids the network, `ACCESS_TOKEN` (upstream's; `HF_TOKEN` too) is sent."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from workers.initializer.downloading import Retries, download_file, get_json
from workers.initializer.storage_uri import ACCESS_TOKEN_ENV, AssetKind, StorageUri, StorageUriError

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
REVISION = "main"
MODEL_ALLOW = ("*.json", "*.safetensors", "*.model")
MODEL_IGNORE = ("*.msgpack", "*.h5", "*.bin", ".pt", ".pth")
"""Upstream's allow_patterns and ignore_patterns for models (its `.pt`/`.pth` as written)."""
_TRUE = frozenset({"1", "on", "yes", "true"})


def repo_id(uri: StorageUri, kind: AssetKind) -> str:
    """Upstream's repository of `uri`: a dataset's is the first two segments, a model's the
    whole path."""
    parts = uri.location.split("/")
    if kind == "dataset":
        if len(parts) < 2 or not parts[1]:
            raise StorageUriError(
                f"STORAGE_URI {uri.text!r}: a dataset is hf://<owner>/<name> (upstream reads "
                "the repository from the first two segments)"
            )
        return f"{parts[0]}/{parts[1]}"
    return uri.location.rstrip("/")


def _wanted(name: str, kind: AssetKind) -> bool:
    if kind == "dataset":
        return True
    allowed = any(fnmatch.fnmatch(name, p) for p in MODEL_ALLOW)
    return allowed and not any(fnmatch.fnmatch(name, p) for p in MODEL_IGNORE)


def snapshot(
    uri: StorageUri,
    kind: AssetKind,
    target: Path,
    env: Mapping[str, str],
    retries: Retries | None = None,
) -> list[Path]:
    """Download the repository's files under `target`; the files written."""
    repo = repo_id(uri, kind)
    if env.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        raise StorageUriError(
            f"cannot fetch {uri.text}: HF_HUB_OFFLINE is set, and the Hugging Face Hub is the "
            "only place it can come from"
        )
    endpoint = (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    token = env.get(ACCESS_TOKEN_ENV) or env.get("HF_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    plural, prefix = ("datasets", "datasets/") if kind == "dataset" else ("models", "")
    info = get_json(
        f"{endpoint}/api/{plural}/{repo}/revision/{REVISION}",
        uri=uri.text,
        headers=headers,
        retries=retries,
    )
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(siblings, list):
        raise StorageUriError(f"cannot fetch {uri.text}: the Hub's answer lists no files")
    names = [s["rfilename"] for s in siblings if isinstance(s, dict) and "rfilename" in s]
    log.info("Downloading %s: %s", kind, repo)
    written = []
    for name in names:
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts:
            raise StorageUriError(f"cannot fetch {uri.text}: the Hub listed a file {name!r}")
        if not _wanted(name, kind):
            continue
        url = f"{endpoint}/{prefix}{repo}/resolve/{REVISION}/{quote(name)}"
        written.append(
            download_file(url, target / path, uri=uri.text, headers=headers, retries=retries)
        )
    return written
