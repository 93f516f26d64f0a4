"""The training runtimes a TrainJob may name: upstream's defaults shipped in schemas/runtimes/,
and operators' own (Cluster)TrainingRuntime files, loaded from directories named by
`trainhub --runtimes DIR` or `TRAINHUB_RUNTIMES` (several joined with the path separator)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from schemas.errors import JobInvalid, describe_validation_error
from schemas.trainer import AnyRuntime, ClusterTrainingRuntime, RuntimeRef, TrainingRuntime

RUNTIMES_ENV = "TRAINHUB_RUNTIMES"

_RuntimeKey = tuple[str, str, str]
"""(kind, namespace or "", name)."""


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
    """Runtimes by kind, namespace and name; a later file of the same name replaces one."""

    def __init__(self) -> None:
        self._runtimes: dict[_RuntimeKey, AnyRuntime] = {}

    def add(self, runtime: AnyRuntime) -> None:
        namespace = (
            (runtime.metadata.namespace or "default") if runtime.kind == "TrainingRuntime" else ""
        )
        self._runtimes[(runtime.kind, namespace, runtime.metadata.name)] = runtime

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
        kind = ref.kind or "ClusterTrainingRuntime"
        return self._runtimes.get((kind, namespace if kind == "TrainingRuntime" else "", ref.name))

    def runtimes(self) -> list[AnyRuntime]:
        """Every runtime, ClusterTrainingRuntimes first, each kind by namespace and name."""
        return [
            self._runtimes[key]
            for key in sorted(self._runtimes, key=lambda k: (k[0] != "ClusterTrainingRuntime", k))
        ]

    def names(self) -> list[str]:
        """Every runtime by the name a runtimeRef gives (namespaced ones with namespace)."""
        return sorted(
            f"{kind} {namespace}/{name}" if namespace else name
            for kind, namespace, name in self._runtimes
        )

    def known_text(self) -> str:
        return ", ".join(self.names()) or "(none)"


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
            catalog.add(runtime)
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
