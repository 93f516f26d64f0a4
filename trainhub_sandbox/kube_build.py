"""Build etcd, kube-apiserver, kube-scheduler, kwok (and, for clusters that garbage-collect,
kube-controller-manager) from Go modules into a versioned cache.

The sandbox's member clusters run these binaries directly; nothing is downloaded prebuilt.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from trainhub_sandbox.cache import default_cache_dir
from trainhub_sandbox.errors import SandboxError

log = logging.getLogger(__name__)

# 1.36 is the newest minor whose own go.mod still pins an etcd 3.6 client (v3.6.8; 1.37 moved to
# etcd 3.7), its toolchain floor (go 1.26.0) matches the Go on our machines, and kwok v0.8.0 is
# built against client-go v0.36, so every piece of the sandbox speaks the same API release.
KUBERNETES_VERSION = "v1.36.3"
# The exact etcd release that k8s.io/kubernetes v1.36.3 requires, i.e. the one it is tested with.
ETCD_VERSION = "v3.6.8"
# The newest kwok the Go module proxy serves; its stages come from data/kube/stages.yaml.
KWOK_VERSION = "v0.8.0"

KUBE_COMMANDS = ("kube-apiserver", "kube-scheduler")
CONTROLLER_MANAGER = "kube-controller-manager"
_WRAPPER_GO_VERSION = "1.26.0"
_OUTPUT_TAIL_LINES = 60


@dataclass(frozen=True)
class KubeBinaries:
    """Paths of the four executables one sandbox member cluster needs."""

    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kwok: Path


def kube_bin_dir(cache_dir: Path | None = None) -> Path:
    """Where `build_kube_binaries` puts (and looks for) the executables."""
    return (cache_dir or default_cache_dir()) / f"kube-{KUBERNETES_VERSION}" / "bin"


def build_kube_binaries(cache_dir: Path | None = None) -> KubeBinaries:
    """Return the four binaries, building whichever is missing or stamped with another version.

    `cache_dir` replaces the sandbox cache root (see `default_cache_dir`). The first build
    downloads about 1-2 GB of modules and compiles for 10-20 minutes on two cores; later calls
    only check the version stamps.
    """
    root = (cache_dir or default_cache_dir()) / f"kube-{KUBERNETES_VERSION}"
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    binaries = KubeBinaries(
        etcd=bin_dir / "etcd",
        kube_apiserver=bin_dir / "kube-apiserver",
        kube_scheduler=bin_dir / "kube-scheduler",
        kwok=bin_dir / "kwok",
    )
    # Parallel test sessions share the cache: one builds, the others wait and reuse it.
    with (root / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _is_current(bin_dir, "etcd", ETCD_VERSION):
            _build_etcd(root / "src" / "etcd", bin_dir)
        if not all(_is_current(bin_dir, name, KUBERNETES_VERSION) for name in KUBE_COMMANDS):
            _build_kubernetes(root / "src" / "kubernetes", bin_dir, KUBE_COMMANDS)
        if not _is_current(bin_dir, "kwok", KWOK_VERSION):
            _build_kwok(root / "src" / "kwok", bin_dir)
    return binaries


def build_controller_manager(cache_dir: Path | None = None) -> Path:
    """Return kube-controller-manager of the same Kubernetes release, building it if missing.

    Only the clusters that garbage-collect run it, so it is built apart from the other
    binaries, from its own wrapper module; the Go build cache shares what it has in common with
    kube-apiserver and kube-scheduler, so after those its own build takes a few minutes.
    """
    root = (cache_dir or default_cache_dir()) / f"kube-{KUBERNETES_VERSION}"
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _is_current(bin_dir, CONTROLLER_MANAGER, KUBERNETES_VERSION):
            _build_kubernetes(root / "src" / CONTROLLER_MANAGER, bin_dir, (CONTROLLER_MANAGER,))
    return bin_dir / CONTROLLER_MANAGER


def _stamp_path(bin_dir: Path, name: str) -> Path:
    return bin_dir / f".{name}.version"


def _is_current(bin_dir: Path, name: str, version: str) -> bool:
    stamp = _stamp_path(bin_dir, name)
    if not (bin_dir / name).is_file() or not stamp.is_file():
        return False
    return stamp.read_text().strip() == version


def _install(built: Path, bin_dir: Path, version: str) -> None:
    """Move a fresh binary into place atomically, then stamp it (the stamp is the marker)."""
    target = bin_dir / built.name
    os.replace(built, target)
    target.chmod(0o755)
    _stamp_path(bin_dir, built.name).write_text(version + "\n")
    log.info("sandbox binary ready: %s %s", target, version)


def _build_etcd(src: Path, bin_dir: Path) -> None:
    module = "go.etcd.io/etcd/server/v3"
    _write_wrapper(src, "trainhub.local/sandbox/etcd", (module, ETCD_VERSION), [], [], [module])
    _go(["mod", "tidy"], src, "etcd: resolving modules")
    _check_selected(src, module, ETCD_VERSION)
    with tempfile.TemporaryDirectory(dir=bin_dir) as out:
        built = Path(out) / "etcd"
        _go(
            ["build", *_build_flags(), "-o", str(built), "go.etcd.io/etcd/server/v3"],
            src,
            f"etcd {ETCD_VERSION}: compiling",
        )
        _install(built, bin_dir, ETCD_VERSION)


def _build_kubernetes(src: Path, bin_dir: Path, commands: tuple[str, ...]) -> None:
    k8s_go_mod = _download_go_mod("k8s.io/kubernetes", KUBERNETES_VERSION)
    replaces = staging_replaces(k8s_go_mod, KUBERNETES_VERSION)
    godebug = [line for line in k8s_go_mod.splitlines() if line.startswith("godebug ")]
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in commands]
    kubernetes = ("k8s.io/kubernetes", KUBERNETES_VERSION)
    _write_wrapper(
        src, "trainhub.local/sandbox/kubernetes", kubernetes, replaces, godebug, packages
    )
    _go(["mod", "tidy"], src, "kubernetes: resolving modules")
    _check_selected(src, *kubernetes)
    ldflags = " ".join(_kube_version_ldflags(KUBERNETES_VERSION))
    with tempfile.TemporaryDirectory(dir=bin_dir) as out:
        _go(
            ["build", *_build_flags(), "-ldflags", ldflags, "-o", out + os.sep, *packages],
            src,
            f"kubernetes {KUBERNETES_VERSION}: compiling {', '.join(commands)}",
        )
        for name in commands:
            _install(Path(out) / name, bin_dir, KUBERNETES_VERSION)


def _build_kwok(src: Path, bin_dir: Path) -> None:
    src.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=bin_dir) as out:
        _go(
            ["install", *_build_flags(), f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}"],
            src,
            f"kwok {KWOK_VERSION}: compiling",
            extra_env={"GOBIN": out},
        )
        _install(Path(out) / "kwok", bin_dir, KWOK_VERSION)


def staging_replaces(k8s_go_mod: str, version: str) -> list[str]:
    """Turn k8s.io/kubernetes' `k8s.io/x => ./staging/...` replaces into published versions.

    Staging modules are tagged v0.<minor>.<patch> for kubernetes v1.<minor>.<patch>.
    """
    staging_version = "v0" + version[len("v1") :]
    replaces = []
    for line in k8s_go_mod.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "=>" and parts[2].startswith("./staging/"):
            replaces.append(f"{parts[0]} => {parts[0]} {staging_version}")
    if not replaces:
        raise SandboxError(f"no staging replaces found in k8s.io/kubernetes {version} go.mod")
    return replaces


def _kube_version_ldflags(version: str) -> list[str]:
    """The `-X` flags hack/lib/version.sh sets, so binaries report their real version."""
    major, minor = version.removeprefix("v").split(".")[:2]
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return [
        f"-X {package}.{key}={value}"
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for key, value in values.items()
    ]


def _build_flags() -> list[str]:
    jobs = os.environ.get("TRAINHUB_GO_BUILD_JOBS") or str(os.cpu_count() or 1)
    return ["-trimpath", "-buildvcs=false", "-p", jobs]


def _write_wrapper(
    src: Path,
    module: str,
    requirement: tuple[str, str],
    replaces: list[str],
    godebug: list[str],
    tools: list[str],
) -> None:
    """Write a throwaway main module that pins `requirement` and whose `tool` lines pull in
    the packages to build (so `go mod tidy` resolves exactly what the build needs)."""
    src.mkdir(parents=True, exist_ok=True)
    lines = [f"module {module}", "", f"go {_WRAPPER_GO_VERSION}", *godebug, ""]
    lines += [f"require {requirement[0]} {requirement[1]}", ""]
    lines += ["tool (", *(f"\t{tool}" for tool in tools), ")", ""]
    if replaces:
        lines += ["replace (", *(f"\t{replace}" for replace in replaces), ")", ""]
    (src / "go.mod").write_text("\n".join(lines))
    (src / "go.sum").unlink(missing_ok=True)


def _check_selected(src: Path, module: str, version: str) -> None:
    """Fail if minimum version selection moved `module` off the release we mean to build."""
    selected = _go(["list", "-m", "-f", "{{.Version}}", module], src, f"{module}: version")
    if selected.strip() != version:
        raise SandboxError(f"{module} resolved to {selected.strip()}, expected {version}")


def _download_go_mod(module: str, version: str) -> str:
    output = _go(["mod", "download", "-json", f"{module}@{version}"], None, f"{module}: go.mod")
    info = json.loads(output)
    if "Error" in info:
        raise SandboxError(f"go mod download {module}@{version}: {info['Error']}")
    return Path(info["GoMod"]).read_text()


def _go(
    args: list[str], cwd: Path | None, what: str, extra_env: dict[str, str] | None = None
) -> str:
    """Run `go` at the lowest CPU priority, logging its output; return stdout.

    Raises SandboxError with the tail of the output when go fails.
    """
    go = shutil.which("go")
    if go is None:
        raise SandboxError("building the Kubernetes sandbox needs Go, but `go` is missing")
    nice = shutil.which("nice")
    command = [nice, "-n", "19", go, *args] if nice else [go, *args]
    env = {**os.environ, "CGO_ENABLED": "0", **(extra_env or {})}
    env.pop("GOFLAGS", None)  # our flags are explicit; a stray -mod=vendor would break the build
    log.info("%s (go %s)", what, " ".join(args[:2]))
    started = time.monotonic()
    with tempfile.TemporaryFile() as stdout:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True
        )
        tail = _follow_stderr(process, what)
        stdout.seek(0)
        output = stdout.read().decode()
    if process.returncode != 0:
        raise SandboxError(
            f"{what} failed: go {' '.join(args)} exited {process.returncode}\n" + "\n".join(tail)
        )
    log.info("%s done in %.0fs", what, time.monotonic() - started)
    return output


def _follow_stderr(process: subprocess.Popen[str], what: str) -> deque[str]:
    tail: deque[str] = deque(maxlen=_OUTPUT_TAIL_LINES)
    assert process.stderr is not None
    for line in process.stderr:
        tail.append(line.rstrip())
        log.debug("%s: %s", what, line.rstrip())
    process.wait()
    return tail
