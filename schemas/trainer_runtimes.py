"""The training runtimes a TrainJob may name: upstream's defaults shipped in schemas/runtimes/,
operators' own (Cluster)TrainingRuntime files, loaded from directories named by
`trainhub --runtimes DIR` or `TRAINHUB_RUNTIMES` (several joined with the path separator), and
those operators apply on the bus (the runtimes topic: a catalog layered over this process's,
see `RuntimeCatalog(base=...)`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from schemas.errors import JobInvalid, describe_validation_error
from schemas.trainer import AnyRuntime, ClusterTrainingRuntime, RuntimeRef, TrainingRuntime

RUNTIMES_ENV = "TRAINHUB_RUNTIMES"

RuntimeKey = tuple[str, str, str]
"""(kind, namespace or "", name)."""
CLUSTER_RUNTIME = "ClusterTrainingRuntime"
NAMESPACED_RUNTIME = "TrainingRuntime"
RUNTIME_KINDS = (CLUSTER_RUNTIME, NAMESPACED_RUNTIME)

SHIPPED, FILE, BUS = "shipped", "file", "bus"
"""Where a runtime in a catalog came from; a later layer overrides an earlier one."""


def runtime_key(runtime: AnyRuntime) -> RuntimeKey:
    namespace = (
        (runtime.metadata.namespace or "default") if runtime.kind == NAMESPACED_RUNTIME else ""
    )
    return (runtime.kind, namespace, runtime.metadata.name)


def record_key(key: RuntimeKey) -> str:
    """A runtime's key on the runtimes topic: `KIND/NAMESPACE/NAME` (NAMESPACE empty for a
    ClusterTrainingRuntime), so that a tombstone of that key deletes exactly it."""
    return "/".join(key)


def key_of_record(text: str) -> RuntimeKey:
    """The runtime a runtimes-topic key names; ValueError when it names none."""
    parts = text.split("/")
    if len(parts) != 3 or parts[0] not in RUNTIME_KINDS or not parts[2]:
        raise ValueError(
            f"runtime record key {text[:300]!r}: expected KIND/NAMESPACE/NAME with KIND "
            f"{' or '.join(RUNTIME_KINDS)}"
        )
    kind, namespace, name = parts
    if (kind == CLUSTER_RUNTIME) != (namespace == ""):
        raise ValueError(
            f"runtime record key {text[:300]!r}: a {CLUSTER_RUNTIME} has no namespace, a "
            f"{NAMESPACED_RUNTIME} has one"
        )
    return kind, namespace, name


def shown_name(key: RuntimeKey) -> str:
    """`kind name` or `kind namespace/name`, as messages and tables name a runtime."""
    kind, namespace, name = key
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def runtime_document(runtime: AnyRuntime) -> dict[str, Any]:
    """The runtime as a document again (what `parse_runtime` reads back to the same)."""
    return runtime.model_dump(mode="json", exclude_none=True)


def parse_runtime(document: object, origin: str = "<input>") -> AnyRuntime:
    """Validate one (Cluster)TrainingRuntime document; JobInvalid naming what is wrong."""
    if not isinstance(document, dict):
        raise JobInvalid(f"{origin}: a training runtime must be a mapping")
    kind = document.get("kind")
    classes: dict[object, type[AnyRuntime]] = {
        "TrainingRuntime": TrainingRuntime,
        "ClusterTrainingRuntime": ClusterTrainingRuntime,
    }
    if kind not in classes:
        raise JobInvalid(
            f"{origin}: kind: expected TrainingRuntime or ClusterTrainingRuntime (got {kind!r})"
        )
    try:
        return classes[kind].model_validate(document)
    except ValidationError as exc:
        raise JobInvalid(f"{origin}: {kind}: {describe_validation_error(exc)}") from exc


class RuntimeCatalog:
    """Runtimes by kind, namespace and name; a later one of the same key replaces one.

    `base`: the catalog below this one (called at each look-up, so that it may be rebuilt):
    this catalog's own runtimes override the base's of the same key, and removing one of
    its own shows the base's again. The hub's catalog is the bus's runtimes over this
    process's (shipped, then files)."""

    def __init__(self, base: Callable[[], RuntimeCatalog] | None = None) -> None:
        self._runtimes: dict[RuntimeKey, AnyRuntime] = {}
        self._origins: dict[RuntimeKey, str] = {}
        self._base = base

    def add(self, runtime: AnyRuntime, origin: str = FILE) -> None:
        key = runtime_key(runtime)
        self._runtimes[key] = runtime
        self._origins[key] = origin

    def remove(self, key: RuntimeKey) -> AnyRuntime | None:
        """Forget one of this catalog's own runtimes (not the base's); the one removed."""
        self._origins.pop(key, None)
        return self._runtimes.pop(key, None)

    def load_dir(self, directory: Path) -> list[AnyRuntime]:
        """Every runtime in the directory's *.yaml / *.yml / *.json files (sorted by name)."""
        if not directory.is_dir():
            raise JobInvalid(f"{directory}: runtimes directory not found")
        loaded = []
        for path in sorted(
            [*directory.glob("*.yaml"), *directory.glob("*.yml"), *directory.glob("*.json")]
        ):
            try:
                documents = [
                    d for d in yaml.safe_load_all(path.read_text("utf-8")) if d is not None
                ]
            except (OSError, yaml.YAMLError) as exc:
                raise JobInvalid(f"{path}: not a readable YAML runtime file: {exc}") from exc
            for position, document in enumerate(documents, 1):
                runtime = parse_runtime(document, f"{path}#{position}")
                self.add(runtime)
                loaded.append(runtime)
        return loaded

    def find(self, ref: RuntimeRef, namespace: str) -> AnyRuntime | None:
        kind = ref.kind or CLUSTER_RUNTIME
        key = (kind, namespace if kind == NAMESPACED_RUNTIME else "", ref.name)
        found = self._runtimes.get(key)
        if found is None and self._base is not None:
            return self._base().find(ref, namespace)
        return found

    def entries(self) -> dict[RuntimeKey, tuple[AnyRuntime, str]]:
        """Every runtime with where it came from, the base's overridden by this one's."""
        found = self._base().entries() if self._base is not None else {}
        found.update({k: (r, self._origins[k]) for k, r in self._runtimes.items()})
        return found

    def runtimes(self) -> list[AnyRuntime]:
        """Every runtime, ClusterTrainingRuntimes first, each kind by namespace and name."""
        entries = self.entries()
        return [
            entries[key][0] for key in sorted(entries, key=lambda k: (k[0] != CLUSTER_RUNTIME, k))
        ]

    def names(self) -> list[str]:
        """Every runtime by the name a runtimeRef gives (namespaced ones with namespace)."""
        return sorted(
            f"{kind} {namespace}/{name}" if namespace else name
            for kind, namespace, name in self.entries()
        )

    def known_text(self) -> str:
        return ", ".join(self.names()) or "(none)"


def pinned_catalog(
    runtime: AnyRuntime, base: Callable[[], RuntimeCatalog] | None = None
) -> RuntimeCatalog:
    """A catalog of the one runtime a job was resolved against (the hub's choice, carried
    with the job), over `base` (default: this process's) for the rest."""
    catalog = RuntimeCatalog(base=base or runtime_catalog)
    catalog.add(runtime, BUS)
    return catalog


def shipped_runtimes() -> list[AnyRuntime]:
    folder = resources.files("schemas") / "runtimes"
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            found.append(parse_runtime(yaml.safe_load(entry.read_text("utf-8")), entry.name))
    return found


_CATALOG: RuntimeCatalog | None = None


def runtime_catalog() -> RuntimeCatalog:
    """This process's runtimes: the shipped ones, then those of `TRAINHUB_RUNTIMES`."""
    global _CATALOG
    if _CATALOG is None:
        catalog = RuntimeCatalog()
        for runtime in shipped_runtimes():
            catalog.add(runtime, SHIPPED)
        for directory in filter(None, os.environ.get(RUNTIMES_ENV, "").split(os.pathsep)):
            catalog.load_dir(Path(directory))
        _CATALOG = catalog
    return _CATALOG


def use_runtime_dirs(directories: list[Path]) -> RuntimeCatalog:
    """Load operators' runtimes into this process's catalog (and its child processes')."""
    catalog = runtime_catalog()
    for directory in directories:
        catalog.load_dir(directory)
    joined = os.pathsep.join(str(d) for d in directories)
    previous = os.environ.get(RUNTIMES_ENV)
    os.environ[RUNTIMES_ENV] = os.pathsep.join(filter(None, [previous, joined]))
    return catalog


def reset_runtime_catalog() -> None:
    """Forget the loaded catalog (tests); the next use loads it again."""
    global _CATALOG
    _CATALOG = None
