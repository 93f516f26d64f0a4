"""Where a pod's volumes are on `local`, whose pods are processes without mounts: each mount
that can stand on this machine is a directory, and a path under its mountPath in the
container's variables, command, args or workingDir is rewritten to that directory, as names
of the job's own Services become 127.0.0.1.

- The volume upstream's runtimes share between a TrainJob's initializers and its nodes,
  `initializer` (whatever its source), is the job's workspace,
  `<workspaces>/<namespace>/<job>`; it outlives the pods, as a claim would, and is removed
  when the job is deleted (the backend's `delete_job`).
- Any other PersistentVolumeClaim `C` is `<pvc dir>/C`, when the worker has one
  (`TRAINHUB_LOCAL_PVC_DIR`); else it stays unmapped, as before.

A pod of one of upstream's initializer images with no command runs trainhub's initializer
(`python -m workers.initializer dataset|model`), told where /workspace and its `pvc://`
claim are."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from schemas.pod import Container
from workers.backends.pod_env import ProcessSpec
from workers.initializer.storage_uri import (
    INITIALIZER_VOLUME,
    PVC_MOUNT_ENV,
    PVC_SOURCE_MOUNT,
    STORAGE_URI_ENV,
    WORKSPACE_ENV,
    WORKSPACE_PATH,
    upstream_initializer,
)
from workers.rendering import LABEL_JOB_NAME, PodPlan

PVC_DIR_SETTING = "--local-pvc-dir (TRAINHUB_LOCAL_PVC_DIR)"


class UnmappableVolume(ValueError):
    """A pod that needs a volume the local backend has no directory for."""


@dataclass
class LocalMounts:
    """A container's mounts as local directories, longest mountPath first."""

    directories: dict[str, Path] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def local_path(self, path: str) -> str | None:
        """`path` (absolute, in the container) where it is on this machine; None if no
        mount holds it."""
        for mount in sorted(self.directories, key=len, reverse=True):
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                rest = path[len(mount) :].lstrip("/")
                local = self.directories[mount]
                return str(local / rest) if rest else str(local)
        return None

    def rewrite(self, value: str) -> str:
        """A path under a mount, alone or as `KEY=PATH` (a flag or a config override)."""
        whole = self.local_path(value) if value.startswith("/") else None
        if whole is not None:
            return whole
        key, equals, path = value.partition("=")
        if equals and path.startswith("/"):
            local = self.local_path(path)
            if local is not None:
                return f"{key}={local}"
        return value


@dataclass(frozen=True)
class LocalVolumes:
    workspaces: Path
    """The jobs' workspaces: `<workspaces>/<namespace>/<job>`."""
    pvc_dir: Path | None = None
    """Directories standing for PersistentVolumeClaims: claim C is `<pvc_dir>/C`."""

    def workspace(self, pod: PodPlan) -> Path:
        job = pod.labels.get(LABEL_JOB_NAME) or pod.name
        return self.workspaces / pod.namespace / job

    def mounts(self, pod: PodPlan, container: Container) -> LocalMounts:
        volumes = {v.get("name"): v for v in (pod.spec.model_extra or {}).get("volumes") or []}
        found = LocalMounts()
        for mount in (container.model_extra or {}).get("volumeMounts") or []:
            name, path = mount.get("name"), str(mount.get("mountPath") or "")
            volume: dict[str, Any] = volumes.get(name) or {}
            sub = str(mount.get("subPath") or "")
            if name == INITIALIZER_VOLUME:
                root = self.workspace(pod)
            elif "persistentVolumeClaim" in volume:
                claim = str((volume["persistentVolumeClaim"] or {}).get("claimName", ""))
                if self.pvc_dir is None:
                    found.warnings.append(
                        f"volume {name!r} (PersistentVolumeClaim {claim!r}) at {path} is not "
                        f"mapped: the local backend maps claims under {PVC_DIR_SETTING}"
                    )
                    continue
                root = self.pvc_dir / claim
            else:
                continue
            if path.startswith("/"):
                found.directories[path] = root / sub if sub else root
        return found


def localized(
    pod: PodPlan, container: Container, spec: ProcessSpec, volumes: LocalVolumes
) -> tuple[ProcessSpec, LocalMounts]:
    """`spec` with its paths on this machine, and trainhub's initializer as the command of a
    container of upstream's initializer images that has none."""
    mounts = volumes.mounts(pod, container)
    env = {name: mounts.rewrite(value) for name, value in spec.env.items()}
    argv = [mounts.rewrite(arg) for arg in spec.argv]
    kind = upstream_initializer(container.image)
    if kind is not None and not container.command:
        argv = [sys.executable, "-m", "workers.initializer", kind]
        env[WORKSPACE_ENV] = mounts.local_path(WORKSPACE_PATH) or str(volumes.workspace(pod))
        if env.get(STORAGE_URI_ENV, "").startswith("pvc://"):
            source = mounts.local_path(PVC_SOURCE_MOUNT)
            if source is None:
                raise UnmappableVolume(
                    f"STORAGE_URI {env[STORAGE_URI_ENV]!r}: the local backend reads a claim "
                    f"from a directory standing for it, under {PVC_DIR_SETTING}, which this "
                    "worker was not given"
                )
            env[PVC_MOUNT_ENV] = source
    return ProcessSpec(argv, env, [*spec.warnings, *mounts.warnings]), mounts


def local_directories(mounts: LocalMounts) -> list[Path]:
    """The directories to make before the process starts (a claim's comes into being as a
    dynamically provisioned one would)."""
    return sorted(set(mounts.directories.values()))


def working_dir(container: Container, mounts: LocalMounts) -> str | None:
    """The container's workingDir where it is on this machine."""
    if container.workingDir is None:
        return None
    return mounts.local_path(str(PurePosixPath(container.workingDir))) or container.workingDir
