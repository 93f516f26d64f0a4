"""Background tasks with an owner: started together, cancelled and awaited on shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class TaskOwner:
    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        self.failed: asyncio.Future[BaseException] | None = None

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        if self.failed is None:
            self.failed = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(coro, name=f"{self._name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            # A second Ctrl-C lands in whichever task runs: the process is being stopped,
            # and asyncio raises it on from the loop; the task did not fail.
            log.debug("task %s interrupted", task.get_name())
        elif exc is not None:
            log.error("task %s crashed", task.get_name(), exc_info=exc)
            if self.failed is not None and not self.failed.done():
                self.failed.set_result(exc)

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
