"""Placement's hot modules compiled to C with mypyc, used only when built from these sources.

Placement is most of the hub's CPU per decision; compiled, the same code decides 1.5 to 2
times as fast. `python -m dispatcher.build_native` (run by `make`; it needs mypy and a C
compiler) compiles the modules in `COMPILED` into `~/.cache/trainhub/native/<key>/`
(`TRAINHUB_NATIVE_DIR` moves the root). The key hashes every source of `dispatcher/` and
`schemas/` (what the compiled code was type-checked against) and the interpreter, so an
edited source is never shadowed by an older build: the package runs as plain Python until it
is built again. `dispatcher/__init__.py` puts a matching build first on the package's path;
`TRAINHUB_NATIVE=0` keeps plain Python even where one exists.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMPILED = (
    "amounts",
    "demand",
    "gang_fit",
    "placement",
    "placement_cache",
    "pod_kind_packing",
    "pod_policy",
    "port_rooms",
    "reservation_versions",
    "reservations",
    "scoring",
)
"""The modules of `dispatcher` that are compiled (placement and what it calls per decision)."""
_PACKAGE = Path(__file__).resolve().parent
_SOURCE_PACKAGES = (_PACKAGE, _PACKAGE.parent / "schemas")
_KEPT_BUILDS = 3
_MYPY_SETTINGS = """\
[mypy]
strict = True
plugins = pydantic.mypy

[mypy-yaml.*]
ignore_missing_imports = True
"""
"""What mypyc type-checks with: `make lint`'s settings (pyproject.toml is not installed with
the packages, and an image need not carry the yaml stubs)."""
_DONE = "complete"


def enabled() -> bool:
    return os.environ.get("TRAINHUB_NATIVE", "1").strip().lower() not in ("0", "false", "no")


def root() -> Path:
    configured = os.environ.get("TRAINHUB_NATIVE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "trainhub" / "native"


def build_key() -> str:
    """A hash of the sources the build is made from, and of the interpreter that loads it."""
    digest = hashlib.sha256(f"{sys.version}|{sys.implementation.cache_tag}".encode())
    for package in _SOURCE_PACKAGES:
        for source in sorted(package.glob("*.py")):
            digest.update(f"{package.name}/{source.name}\0".encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()[:24]


def build_dir() -> Path:
    return root() / build_key()


def activate(package_path: list[str]) -> bool:
    """Put the build of these exact sources first on the package's `__path__` (and its
    shared runtime library on `sys.path`); False when disabled or there is none."""
    if not enabled():
        return False
    try:
        where = build_dir()
    except OSError:
        return False
    if not (where / _DONE).exists():
        return False
    built = {p.name.partition(".")[0] for p in (where / "dispatcher").glob("*.so")}
    if not built >= set(COMPILED) or not any((where / "lib").glob("*.so")):
        return False  # a build someone pruned by hand: plain Python rather than half of it
    package_path.insert(0, str(where / "dispatcher"))
    library = str(where / "lib")
    if library not in sys.path:
        sys.path.append(library)
    return True


def active() -> bool:
    """Whether placement runs compiled in this process."""
    from dispatcher import placement_cache

    return not (placement_cache.__file__ or "").endswith(".py")


def build(*, quiet: bool = False) -> Path:
    """Compile `COMPILED` for the current sources, unless that build exists; its folder.

    RuntimeError (with mypyc's output) when compilation fails.
    """
    target = build_dir()
    if (target / _DONE).exists():
        return target
    root().mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=root(), prefix="building-") as scratch:
        work = Path(scratch)
        for package in _SOURCE_PACKAGES:
            shutil.copytree(package, work / package.name, ignore=_not_sources)
        (work / "mypy.ini").write_text(_MYPY_SETTINGS)
        files = [f"dispatcher/{name}.py" for name in COMPILED]
        done = subprocess.run(
            [sys.executable, "-m", "mypyc", *files],
            cwd=work,
            capture_output=True,
            text=True,
            env={**os.environ, "MYPY_CACHE_DIR": str(work / ".mypy_cache")},
        )
        if done.returncode != 0:
            raise RuntimeError(f"mypyc failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
        staged = work / "result"
        (staged / "dispatcher").mkdir(parents=True)
        (staged / "lib").mkdir()
        for name in COMPILED:
            (built,) = (work / "dispatcher").glob(f"{name}.*.so")
            shutil.move(built, staged / "dispatcher" / built.name)
        for shared in work.glob("*__mypyc.*.so"):
            shutil.move(shared, staged / "lib" / shared.name)
        (staged / _DONE).write_text(f"{time.monotonic() - started:.1f}s\n")
        try:
            staged.rename(target)
        except OSError:
            if not (target / _DONE).exists():  # not a concurrent build of the same sources
                raise
    _prune(keep=target)
    if not quiet:
        print(f"compiled {len(COMPILED)} modules in {time.monotonic() - started:.0f}s: {target}")
    return target


def _not_sources(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if not n.endswith(".py")}


def _prune(keep: Path) -> None:
    """Remove all but the newest few builds (older sources), and abandoned scratch folders."""
    builds = sorted(
        (p for p in root().iterdir() if p.is_dir() and p != keep and (p / _DONE).exists()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in builds[_KEPT_BUILDS - 1 :]:
        shutil.rmtree(old, ignore_errors=True)
    # A build killed midway leaves its scratch folder; one an hour old is no build running.
    cutoff = time.time() - 3600
    for scratch in root().glob("building-*"):
        if scratch.is_dir() and scratch.stat().st_mtime < cutoff:
            shutil.rmtree(scratch, ignore_errors=True)
