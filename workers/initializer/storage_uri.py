"""What a TrainJob initializer's `STORAGE_URI` names, and where the initializers put it.

The paths, variables, volume and images are upstream's (kubeflow/trainer v2.0.0: the
initializers' `pkg/initializers/utils`, the JobSet plugin's constants): `hf://` is the scheme
upstream's images fetch; `pvc://`, `http(s)://`, `file://` and plain paths are trainhub's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal
from urllib.parse import unquote, urlparse

STORAGE_URI_ENV = "STORAGE_URI"
ACCESS_TOKEN_ENV = "ACCESS_TOKEN"
"""Upstream's HuggingFace*Initializer fields, read from the variables of their names."""
WORKSPACE_PATH = "/workspace"
DATASET_DIR = "dataset"
MODEL_DIR = "model"
"""Upstream's DATASET_PATH and MODEL_PATH: `/workspace/dataset` and `/workspace/model`."""
INITIALIZER_VOLUME = "initializer"
"""Upstream's VolumeNameInitializer: the volume its runtimes share between the initializers
and the trainer's nodes (a PersistentVolumeClaim mounted at /workspace)."""
DATASET_INITIALIZER_IMAGE = "ghcr.io/kubeflow/trainer/dataset-initializer"
MODEL_INITIALIZER_IMAGE = "ghcr.io/kubeflow/trainer/model-initializer"
PVC_SOURCE_VOLUME = "pvc-source"
PVC_SOURCE_MOUNT = "/mnt/pvc"
"""`pvc://<claim>/<path>`: the claim as a read-only volume of this name, mounted here in the
initializer's container (as KServe mounts a `pvc://` storage URI's claim)."""
WORKSPACE_ENV = "TRAINHUB_WORKSPACE"
PVC_MOUNT_ENV = "TRAINHUB_PVC_MOUNT"
"""Where the program finds /workspace and /mnt/pvc: unset in a container; on `local`, the
directories that stand for them."""

AssetKind = Literal["dataset", "model"]
Scheme = Literal["file", "pvc", "http", "hf"]
_CLAIM = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_IMAGE_TAIL = re.compile(r"(:[\w][\w.-]*)?(@sha256:[0-9a-f]{64})?$")


class StorageUriError(ValueError):
    """A STORAGE_URI that cannot be fetched, its text in the message."""


@dataclass(frozen=True)
class StorageUri:
    text: str
    scheme: Scheme
    location: str
    """file: the path; pvc: the path inside the claim ('' for all of it); http: the URL;
    hf: the repository path after `hf://`."""
    claim: str | None = None


def parse_storage_uri(text: str) -> StorageUri:
    """The source `text` names; StorageUriError for a scheme no initializer here fetches."""
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme == "":
        if not text.strip():
            raise StorageUriError("STORAGE_URI is empty")
        return StorageUri(text, "file", text)
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise StorageUriError(
                f"STORAGE_URI {text!r}: a file URI names a path on the initializer's machine "
                f"(file:///path), not on host {parsed.netloc!r}"
            )
        return StorageUri(text, "file", unquote(parsed.path))
    if scheme == "pvc":
        claim = parsed.netloc
        if not _CLAIM.match(claim) or len(claim) > 253:
            raise StorageUriError(
                f"STORAGE_URI {text!r}: pvc://<claim>/<path> needs a PersistentVolumeClaim name "
                f"(got {claim!r})"
            )
        inside = unquote(parsed.path).strip("/")
        if ".." in PurePosixPath(inside).parts:
            raise StorageUriError(f"STORAGE_URI {text!r}: the path must stay inside the claim")
        return StorageUri(text, "pvc", inside, claim=claim)
    if scheme in ("http", "https"):
        if not parsed.netloc:
            raise StorageUriError(f"STORAGE_URI {text!r}: the URL names no host")
        return StorageUri(text, "http", text)
    if scheme == "hf":
        if not parsed.netloc:
            raise StorageUriError(f"STORAGE_URI {text!r}: hf://<owner>/<name> names no repository")
        return StorageUri(text, "hf", parsed.netloc + parsed.path)
    raise StorageUriError(
        f"STORAGE_URI {text!r}: unsupported scheme {parsed.scheme!r}; trainhub's initializer "
        "fetches hf://, http://, https://, pvc://, file:// and local paths"
    )


def target_dir(workspace: str, kind: AssetKind) -> str:
    """Where the `kind` initializer puts what it fetched: `<workspace>/dataset` or `/model`."""
    return str(PurePosixPath(workspace) / (DATASET_DIR if kind == "dataset" else MODEL_DIR))


def upstream_initializer(image: str) -> AssetKind | None:
    """Which of upstream's initializer images `image` is (any tag or digest), else None."""
    images: tuple[tuple[AssetKind, str], ...] = (
        ("dataset", DATASET_INITIALIZER_IMAGE),
        ("model", MODEL_INITIALIZER_IMAGE),
    )
    for kind, name in images:
        if image.startswith(name) and _IMAGE_TAIL.fullmatch(image[len(name) :]):
            return kind
    return None
