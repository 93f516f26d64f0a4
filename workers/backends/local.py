"""`local`: each pod is a real process on this machine, reachable on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bus.aiotasks import TaskOwner
from workers.backends.base import Backend, Capacity, PodObservation
from workers.backends.node_pool import NodePool
from workers.network import LoopbackNetwork, Network
from workers.rendering import PodPlan, ServicePlan

log = logging.getLogger(__name__)
_KILL_GRACE = 5.0


@dataclass
class _LocalPod:
    job_uid: str
    plan: PodPlan
    log_path: Path
    process: asyncio.subprocess.Process | None = None


class LocalBackend(Backend):
    kind = "local"

    def __init__(self, pool: NodePool, *, workdir: Path, logs_dir: Path) -> None:
        super().__init__()
        self.pool = pool
        self.workdir = workdir
        self.logs_dir = logs_dir
        self._pods: dict[str, _LocalPod] = {}
        self._tasks = TaskOwner("local")

    def network(self) -> Network:
        return LoopbackNetwork()

    async def start(self) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)

    async def close(self) -> None:
        for key in list(self._pods):
            await self._stop_process(self._pods[key])
        await self._tasks.cancel_all()

    async def create_service(self, job_uid: str, service: ServicePlan) -> None:
        """Nothing to create: services are 127.0.0.1 with ports from the job's network."""

    async def create_pod(self, job_uid: str, pod: PodPlan) -> None:
        key = f"{pod.namespace}/{pod.name}"
        if key in self._pods:
            return
        log_path = self.logs_dir / f"{pod.namespace}_{pod.name}.log"
        local = _LocalPod(job_uid, pod, log_path)
        self._pods[key] = local
        container = pod.main_container
        argv = [*(container.command or []), *(container.args or [])]
        if not argv:
            await self._emit(local, "Failed", 127, "the local backend needs a container command")
            return
        if self.pool.bind(key, pod.requests, {}) is None:
            log.warning("local node is over-committed by pod %s", key)
        env = {
            **self._base_env(),
            **{e.name: e.value for e in container.env or [] if e.value is not None},
        }
        cwd = self.workdir / container.workingDir if container.workingDir else self.workdir
        output: IO[bytes] = log_path.open("wb")
        try:
            local.process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env=env,
                stdout=output,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            output.close()
            self.pool.unbind(key)
            await self._emit(local, "Failed", 127, f"cannot start {argv[0]!r}: {exc}")
            return
        output.close()
        await self._emit(local, "Running")
        self._tasks.spawn(self._wait(key, local), key)

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
        self.pool.unbind(key)
        if self._pods.get(key) is not pod:
            return
        # A signal death reads as 128+N, as a container runtime reports it.
        exit_code = 128 - code if code < 0 else code
        await self._emit(pod, "Succeeded" if exit_code == 0 else "Failed", exit_code)

    async def _emit(
        self, pod: _LocalPod, phase: str, exit_code: int | None = None, message: str | None = None
    ) -> None:
        await self.observations.put(
            PodObservation(pod.job_uid, pod.plan.name, phase, exit_code, message, node="local")  # type: ignore[arg-type]
        )

    async def _stop_process(self, pod: _LocalPod) -> None:
        process = pod.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), _KILL_GRACE)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()

    async def delete_pod(self, job_uid: str, name: str, namespace: str) -> None:
        key = f"{namespace}/{name}"
        pod = self._pods.pop(key, None)
        if pod is not None:
            await self._stop_process(pod)
            self.pool.unbind(key)

    async def delete_job(self, job_uid: str) -> None:
        for key in [k for k, p in self._pods.items() if p.job_uid == job_uid]:
            namespace, name = key.split("/", 1)
            await self.delete_pod(job_uid, name, namespace)

    async def capacity(self) -> Capacity:
        running = {
            p.job_uid
            for p in self._pods.values()
            if p.process is not None and p.process.returncode is None
        }
        return Capacity(self.pool.snapshots(), running)

    async def job_uids(self) -> set[str]:
        return {p.job_uid for p in self._pods.values()}

    async def pod_logs(self, job_uid: str, name: str) -> str:
        pod = next((p for p in self._pods.values() if p.plan.name == name), None)
        if pod is None or not pod.log_path.exists():
            return ""
        return await asyncio.to_thread(pod.log_path.read_text, errors="replace")
