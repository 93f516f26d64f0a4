"""Locks that let a worker carry out different jobs' work at once: one lock per job, and one
over every job for the passes that judge them all together (a sweep after an outage)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass
class _JobLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    """Holders and waiters: the entry goes once none is left."""


class JobLocks:
    """`job(uid)` serialises the work on one job; `every_job()` waits until no job's work is
    in hand and keeps new work out until it is done. A pass over every job that is waiting
    goes before work asked for after it, so a steady stream of jobs cannot starve it."""

    def __init__(self) -> None:
        self._jobs: dict[str, _JobLock] = {}
        self._in_hand = 0
        """Work inside `job()` (holding or waiting for its job's lock)."""
        self._none_in_hand = asyncio.Event()
        self._none_in_hand.set()
        self._open = asyncio.Event()
        """Cleared while a pass over every job waits or runs."""
        self._open.set()
        self._passes = asyncio.Lock()

    @asynccontextmanager
    async def job(self, uid: str) -> AsyncIterator[None]:
        while not self._open.is_set():
            await self._open.wait()
        # Nothing awaits between the check above and this count: a pass sees it.
        self._in_hand += 1
        self._none_in_hand.clear()
        entry = self._jobs.setdefault(uid, _JobLock())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if not entry.users and self._jobs.get(uid) is entry:
                del self._jobs[uid]
            self._in_hand -= 1
            if not self._in_hand:
                self._none_in_hand.set()

    @asynccontextmanager
    async def every_job(self) -> AsyncIterator[None]:
        async with self._passes:
            self._open.clear()
            try:
                await self._none_in_hand.wait()
                yield
            finally:
                self._open.set()
