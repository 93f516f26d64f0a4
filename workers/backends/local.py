"""`local`: each pod is a real process on this machine, reachable on 127.0.0.1.

A pod that must not start before its master (`PodPlan.master_address`) waits, in a task of
its own, until a TCP connection to the master succeeds; that is what the init container does
on a real cluster.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from bus.aiotasks import TaskOwner
from schemas.events import ListedPod
from workers.backends.base import Backend, BackendError, Capacity, PodObservation, PodPhase
from workers.backends.crash_backoff import CrashBackoff
from workers.backends.local_volumes import (
    LocalMounts,
    LocalVolumes,
    UnmappableVolume,
    local_directories,
    localized,
    working_dir,
)
from workers.backends.node_pool import NodePool
from workers.backends.pod_env import ProcessSpec, UnresolvableEnv, process_spec
from workers.initializer.storage_uri import upstream_initializer
from workers.network import LoopbackNetwork, Network
from workers.rendering import INIT_CONTAINER_MAX_TRIES, PodPlan, ServicePlan

_PR_SET_PDEATHSIG = 1
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def _die_with_worker(worker_pid: int) -> Callable[[], None] | None:
    """What a pod's process runs before its command (Linux): it is killed when the worker
    dies, as a node's containers die with it. A worker killed outright (SIGKILL, OOM) thus
    leaves no orphans running beside the pods its successor creates again."""
    prctl = _PRCTL
    if prctl is None:
        return None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != worker_pid:  # the worker died before that took effect
            os._exit(137)

    return arm


_LIVE_GROUPS: set[int] = set()
"""Process groups of this process's pods (their leader's pid) that may still have members."""


def _kill_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


@atexit.register
def _kill_live_groups() -> None:
    """The last resort: whatever way this process ends short of SIGKILL, its pods' processes
    end with it, those a pod's command started in the background included (PDEATHSIG reaches
    only each pod's first process)."""
    for pgid in list(_LIVE_GROUPS):
        _kill_group(pgid, signal.SIGKILL)
    _LIVE_GROUPS.clear()


def _forget_group(pgid: int) -> None:
    """The pod's first process has ended: what it left running in its group ends too, as a
    container's processes end with its main one."""
    _kill_group(pgid, signal.SIGKILL)
    _LIVE_GROUPS.discard(pgid)


log = logging.getLogger(__name__)
_KILL_GRACE = 5.0
_NODE = "local"
CANNOT_START = 127
"""The exit code a shell gives a command it cannot run."""
MASTER_WAIT_INTERVAL = 2.0
"""Seconds between two tries to reach the master, as upstream's init container sleeps."""
_CONNECT_TIMEOUT = 2.0
_MESSAGE_BYTES = 2048
"""The kubelet's cap on a termination message taken from the log."""


class CannotRunLocally(BackendError):
    """A pod the local backend can never start as written (no command, a variable it cannot
    resolve): a refusal for good, which fails the job at once."""


@dataclass
class _LocalPod:
    job_uid: str
    plan: PodPlan
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    starter: asyncio.Task[None] | None = None
    """Waits for the master before starting the process."""
    bound: bool = False
    mounts: LocalMounts | None = None
    message_from_log: bool = False
    """A failure's message is the log's last line (`terminationMessagePolicy:
    FallbackToLogsOnError`, and trainhub's initializer, which ends its log with the reason)."""
    phase: PodPhase = "Pending"
    """The phase last told (its observations'), for listings."""
    message: str | None = None
    started: datetime | None = None
    """When its process started."""

    def listed(self) -> ListedPod:
        return ListedPod(
            name=self.plan.name,
            namespace=self.plan.namespace,
            phase=self.phase,
            node_name=_NODE if self.bound or self.started else None,
            start_time=self.started,
            message=self.message,
        )


class LocalBackend(Backend):
    kind = "local"

    def __init__(
        self,
        pool: NodePool,
        *,
        workdir: Path,
        logs_dir: Path,
        master_wait_tries: int = INIT_CONTAINER_MAX_TRIES,
        master_wait_interval: float = MASTER_WAIT_INTERVAL,
        pvc_dir: Path | None = None,
    ) -> None:
        """`pvc_dir`: the directories standing for PersistentVolumeClaims (claim C is
        `<pvc_dir>/C`); the jobs' workspaces are under `<logs_dir>/workspaces`."""
        super().__init__()
        self.pool = pool
        self.workdir = workdir
        self.logs_dir = logs_dir
        self.volumes = LocalVolumes(workspaces=logs_dir / "workspaces", pvc_dir=pvc_dir)
        self.master_wait_tries = master_wait_tries
        self.master_wait_interval = master_wait_interval
        self._pods: dict[str, _LocalPod] = {}
        self._jobs: dict[str, set[str]] = {}
        """job uid -> its pods' keys, so that no call on a job walks every pod."""
        self._tasks = TaskOwner("local")
        self.backoff = CrashBackoff()

    def network(self) -> Network:
        return LoopbackNetwork()

    async def start(self) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)

    async def close(self) -> None:
        # Every pod is told at once, so that a stop cut short still reached them all.
        for pod in self._pods.values():
            if pod.process is not None and pod.process.returncode is None:
                _kill_group(pod.process.pid, signal.SIGTERM)
        for key in list(self._pods):
            await self._stop_process(self._pods[key])
        await self._tasks.cancel_all()

    async def create_service(self, job_uid: str, service: ServicePlan) -> None:
        """Nothing to create: services are 127.0.0.1 with ports from the job's network."""

    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        """Start the pod's process; `CannotRunLocally` when it can never start here as
        written (no restart would help: the job fails at once rather than restart for good)."""
        key = f"{pod.namespace}/{pod.name}"
        if key in self._pods:
            return
        container = pod.main_container
        try:
            spec, mounts = localized(
                pod, container, process_spec(pod, container, _NODE), self.volumes
            )
        except (UnresolvableEnv, UnmappableVolume) as exc:
            raise CannotRunLocally(f"pod {pod.name}: {exc}") from None
        if not spec.argv:
            raise CannotRunLocally(
                f"pod {pod.name}: container {container.name!r} has no command: the local "
                "backend runs each container's command as a process and cannot know an "
                "image's entrypoint; give the container a command (and args), or run the job "
                "on a kube cluster"
            )
        local = _LocalPod(job_uid, pod, self.logs_dir / f"{pod.namespace}_{pod.name}.log")
        local.mounts = mounts
        local.message_from_log = (container.model_extra or {}).get(
            "terminationMessagePolicy"
        ) == "FallbackToLogsOnError" or (
            upstream_initializer(container.image) is not None and not container.command
        )
        self._pods[key] = local
        self._jobs.setdefault(job_uid, set()).add(key)
        delay = self.backoff.delay(key)
        for warning in spec.warnings:
            log.warning("pod %s: %s", key, warning, extra={"job": job_uid})
        local.bound = self.pool.bind(key, pod.requests, {}) is not None
        if not local.bound:
            log.warning("local node is over-committed by pod %s", key, extra={"job": job_uid})
        if pod.master_address is None and not delay:
            await self._start_process(key, local, spec)
        else:
            await self._emit(local, "Pending")
            local.starter = self._tasks.spawn(self._start_later(key, local, spec, delay), key)

    async def _start_later(self, key: str, pod: _LocalPod, spec: ProcessSpec, delay: float) -> None:
        """Start once the crash backoff has passed and the master accepts connections."""
        if delay:
            log.info("%s restarts in %gs (crash backoff)", key, delay, extra={"job": pod.job_uid})
            await asyncio.sleep(delay)
        if pod.plan.master_address is None:
            pod.starter = None  # from here on a delete stops the process instead
            await self._start_process(key, pod, spec)
            return
        host, port = pod.plan.master_address
        for attempt in range(self.master_wait_tries):
            if attempt:
                await asyncio.sleep(self.master_wait_interval)
            if await _accepts_connections(host, port):
                pod.starter = None  # from here on a delete stops the process instead
                await self._start_process(key, pod, spec)
                return
            log.debug("%s waits for its master at %s:%d", key, host, port)
        self._unbind(key, pod)
        await self._emit(
            pod,
            "Failed",
            1,
            f"the master at {host}:{port} did not accept connections after "
            f"{self.master_wait_tries} tries {self.master_wait_interval:g}s apart",
        )

    async def _start_process(self, key: str, pod: _LocalPod, spec: ProcessSpec) -> None:
        container = pod.plan.main_container
        mounts = pod.mounts or LocalMounts()
        within = working_dir(container, mounts)
        cwd = self.workdir / within if within else self.workdir
        try:
            await asyncio.to_thread(_make_directories, local_directories(mounts))
        except OSError as exc:
            self._unbind(key, pod)
            await self._emit(pod, "Failed", CANNOT_START, f"cannot make its volumes: {exc}")
            return
        # Appended: a restarted pod's log keeps what the run before it said (why it failed).
        output: IO[bytes] = pod.log_path.open("ab")
        try:
            pod.process = await asyncio.create_subprocess_exec(
                *spec.argv,
                cwd=cwd,
                env={**self._base_env(), **spec.env},
                stdout=output,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_worker(os.getpid()),
            )
        except OSError as exc:
            self._unbind(key, pod)
            await self._emit(pod, "Failed", CANNOT_START, f"cannot start {spec.argv[0]!r}: {exc}")
            return
        finally:
            output.close()
        _LIVE_GROUPS.add(pod.process.pid)
        if self._pods.get(key) is not pod:
            await self._stop_process(pod)  # deleted while it was being started
            return
        await self._emit(pod, "Running")
        self._tasks.spawn(self._wait(key, pod), key)

    @staticmethod
    def _base_env() -> dict[str, str]:
        """This machine's environment, with our interpreter first on PATH so that a pod's
        `python` is the one trainhub runs in (and has its packages)."""
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        return env

    async def _wait(self, key: str, pod: _LocalPod) -> None:
        assert pod.process is not None
        code = await pod.process.wait()
        _forget_group(pod.process.pid)
        if self._pods.get(key) is not pod:
            return  # deleted: its successor under the same name owns the binding now
        self._unbind(key, pod)
        # A signal death reads as 128+N, as a container runtime reports it.
        exit_code = 128 - code if code < 0 else code
        message = None
        if exit_code != 0 and pod.message_from_log:
            message = await asyncio.to_thread(_last_line, pod.log_path)
        await self._emit(pod, "Succeeded" if exit_code == 0 else "Failed", exit_code, message)

    def _unbind(self, key: str, pod: _LocalPod) -> None:
        if pod.bound:
            self.pool.unbind(key)
            pod.bound = False

    async def _emit(
        self,
        pod: _LocalPod,
        phase: PodPhase,
        exit_code: int | None = None,
        message: str | None = None,
    ) -> None:
        if self._pods.get(f"{pod.plan.namespace}/{pod.plan.name}") is not pod:
            return  # a deleted pod says nothing more
        pod.phase, pod.message = phase, message
        if phase == "Running" and pod.started is None:
            pod.started = datetime.now(UTC)
        await self.observations.put(
            PodObservation(pod.job_uid, pod.plan.name, phase, exit_code, message, node=_NODE)
        )

    async def _stop_process(self, pod: _LocalPod) -> None:
        if pod.starter is not None:
            pod.starter.cancel()
        process = pod.process
        if process is None or process.returncode is not None:
            return
        _kill_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), _KILL_GRACE)
        except TimeoutError:
            _kill_group(process.pid, signal.SIGKILL)
            await process.wait()
        _forget_group(process.pid)

    async def delete_pod(self, job_uid: str, name: str, namespace: str) -> None:
        key = f"{namespace}/{name}"
        pod = self._pods.pop(key, None)
        if pod is not None:
            keys = self._jobs.get(pod.job_uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._jobs[pod.job_uid]
            self._unbind(key, pod)
            await self._stop_process(pod)

    async def delete_job(self, job_uid: str, namespace: str | None = None) -> None:
        keys = sorted(self._jobs.get(job_uid, ()))
        # The job's workspace (its `initializer` volume) outlives its pods and goes with the
        # job: one per job, kept for months, would fill the disk. Claims are never touched.
        workspaces = {self.volumes.workspace(self._pods[key].plan) for key in keys}
        for key in keys:
            namespace, name = key.split("/", 1)
            await self.delete_pod(job_uid, name, namespace)
            self.backoff.forget(key)
        for workspace in workspaces:
            await asyncio.to_thread(shutil.rmtree, workspace, ignore_errors=True)

    async def capacity(self) -> Capacity:
        return Capacity(self.pool.snapshots(), {p.job_uid for p in self._pods.values() if p.bound})

    async def job_uids(self) -> set[str]:
        return set(self._jobs)

    async def job_pod_names(self, job_uid: str) -> list[str]:
        return sorted(self._pods[key].plan.name for key in self._jobs.get(job_uid, ()))

    async def job_pods(self, job_uid: str) -> list[ListedPod]:
        pods = [self._pods[key].listed() for key in self._jobs.get(job_uid, ())]
        return sorted(pods, key=lambda listed: listed.name)

    async def pod_logs(self, job_uid: str, name: str) -> str:
        keys = self._jobs.get(job_uid, ())
        pod = next((self._pods[k] for k in keys if self._pods[k].plan.name == name), None)
        if pod is None or not pod.log_path.exists():
            return ""
        return await asyncio.to_thread(pod.log_path.read_text, errors="replace")


def _make_directories(paths: list[Path]) -> None:
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)


def _last_line(log_path: Path) -> str | None:
    """The last line the process wrote (at most the kubelet's 2048 bytes of it)."""
    try:
        with log_path.open("rb") as log_file:
            log_file.seek(max(0, log_file.seek(0, os.SEEK_END) - _MESSAGE_BYTES))
            tail = log_file.read().decode(errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else None


async def _accepts_connections(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), _CONNECT_TIMEOUT)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
