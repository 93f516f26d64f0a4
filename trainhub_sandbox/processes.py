"""The processes the sandbox starts (Kafka, etcd, kube-apiserver, kube-scheduler, kwok): start
one detached with its log file, tell whether it still runs, stop it by its PID (SIGTERM, a
grace period, then SIGKILL), and record it in a state file so that another process can find
and stop it. Nothing is ever found or stopped by name."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainhub_sandbox.errors import SandboxError

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
KILL_GRACE_S = 5.0
"""How long a SIGKILLed process may take to be gone before we give up on it."""

_POLL_S = 0.1
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")

# Children this Python process started, so that stopping one reaps it instead of leaving a
# zombie (and so the Popen objects are not collected while they run, which warns).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class SandboxProcess:
    """A process we started; `start_ticks` (from /proc) guards against a recycled PID."""

    name: str
    pid: int
    start_ticks: int | None
    log: Path
    args: tuple[str, ...] = ()
    """The command line, so that a stopped process can be started again the same way."""

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> SandboxProcess:
        """Read back a process a state file recorded (as `dataclasses.asdict` wrote it)."""
        return cls(
            data["name"],
            data["pid"],
            data["start_ticks"],
            Path(data["log"]),
            tuple(data.get("args") or ()),
        )


# --- start -----------------------------------------------------------------------------------


def spawn(
    name: str,
    args: list[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> SandboxProcess:
    """Start a detached child writing stdout and stderr to `log_path` (appended). It runs in
    a session of its own, so a Ctrl-C aimed at a test run reaches us, not it, and it is not
    killed mid-teardown. `env` adds to (or overrides) our environment."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as output:
        child = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **env} if env else None,
            start_new_session=True,
        )
    _CHILDREN[child.pid] = child
    log.debug("started %s pid %d: %s", name, child.pid, " ".join(args))
    return SandboxProcess(name, child.pid, start_ticks(child.pid), log_path, tuple(args))


def exit_code(process: SandboxProcess | int) -> int | None:
    """The exit status of a child we started that has ended, else None (running, or not
    ours to wait for)."""
    child = _CHILDREN.get(_pid(process))
    return None if child is None else child.poll()


# --- liveness --------------------------------------------------------------------------------


def is_running(process: SandboxProcess | int) -> bool:
    """True while the PID exists, is not a zombie and (for a `SandboxProcess` with start
    ticks) is still the process we started, not a later one given the same number."""
    pid = _pid(process)
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return _pid_exists(pid)
    fields = stat.rsplit(")", 1)[1].split()
    # A zombie (Z) or dead (X) process has exited; only its parent's reaping is left.
    if fields[0] in ("Z", "X"):
        return False
    ticks = process.start_ticks if isinstance(process, SandboxProcess) else None
    return ticks is None or int(fields[19]) == ticks


def command_line_has(pid: int, text: str) -> bool:
    """Whether `text` is part of the process's command line (True where no /proc can tell:
    the caller's PID is trusted then)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return text in cmdline


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (None without /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _pid_exists(pid: int) -> bool:
    if Path("/proc/self").exists():
        return False  # /proc works here, so a missing /proc/<pid> means the process is gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid(process: SandboxProcess | int) -> int:
    return process.pid if isinstance(process, SandboxProcess) else process


# --- stop ------------------------------------------------------------------------------------


def send_signal(process: SandboxProcess | int, signum: signal.Signals) -> None:
    """Signal the process; one that has just exited is fine."""
    try:
        os.kill(_pid(process), signum)
    except ProcessLookupError:
        pass


def wait_gone(process: SandboxProcess | int, timeout: float) -> bool:
    """Wait up to `timeout` seconds for the process to end (reaping it if it is our child);
    return whether it did."""
    child = _CHILDREN.get(_pid(process))
    if child is not None:
        try:
            child.wait(max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            return False
        _CHILDREN.pop(child.pid, None)
        return True
    deadline = time.monotonic() + timeout
    while is_running(process):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def stop(
    process: SandboxProcess | int,
    *,
    grace: float,
    kill_grace: float = KILL_GRACE_S,
    name: str | None = None,
) -> None:
    """Stop a process by its PID: SIGTERM (with a SIGCONT, since a paused process would hold
    it), up to `grace` seconds to end, then SIGKILL (`grace=0`: SIGKILL at once, as a crash
    would). A process already gone is fine; one that survives SIGKILL for `kill_grace`
    seconds raises SandboxError."""
    pid = _pid(process)
    what = name or (process.name if isinstance(process, SandboxProcess) else "process")
    try:
        if not is_running(process):
            return
        if grace > 0:
            send_signal(pid, signal.SIGTERM)
            send_signal(pid, signal.SIGCONT)
            if wait_gone(process, grace):
                return
        send_signal(pid, signal.SIGKILL)
        if not wait_gone(process, kill_grace):
            raise SandboxError(f"{what} (pid {pid}) survived SIGKILL")
    finally:
        if not is_running(process):
            _CHILDREN.pop(pid, None)


# --- logs and ports --------------------------------------------------------------------------


def log_tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a process's log, for an error message."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return f"--- last {lines} lines of {path} ---\n{tail(text, lines)}"


def tail(text: str, lines: int) -> str:
    """The last `lines` lines of `text`, without terminal colour codes."""
    return "\n".join(_ANSI_ESCAPE.sub("", text).rstrip().splitlines()[-lines:])


def free_ports(count: int) -> list[int]:
    """Distinct loopback ports free right now (held together so that they differ)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
