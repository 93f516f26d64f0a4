"""The event loop thread of the blocking client: coroutines submitted from any thread, and
closing that cancels the calls in progress and closes the streams left open."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import AsyncGenerator, Coroutine, Iterator
from typing import Any, TypeVar

from trainhub.sdk_errors import ClientClosedError

_T = TypeVar("_T")


class LoopThread:
    """An event loop on a daemon thread; blocking calls run coroutines on it.

    Closing cancels the calls other threads are blocked in (they raise `ClientClosedError`)
    and closes the streams left open, so no thread waits for ever on a stopped loop."""

    _UNWIND = 5.0
    """Seconds a cancelled call may take to unwind before its caller goes on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="trainhub-sdk", daemon=True
        )
        self._thread.start()
        self._lock = threading.Lock()
        self._calls: set[concurrent.futures.Future[Any]] = set()
        self._streams: weakref.WeakSet[AsyncGenerator[Any, None]] = weakref.WeakSet()
        self.closed = False

    def submit(
        self, coro: Coroutine[Any, Any, _T]
    ) -> tuple[concurrent.futures.Future[_T], threading.Event]:
        """The call running on the loop, and an event set once it has unwound."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking TrainHubClient call from its own event loop")
        settled = threading.Event()

        async def tracked() -> _T:
            try:
                return await coro
            finally:
                settled.set()

        with self._lock:
            if self.closed:
                coro.close()
                raise ClientClosedError("the client is closed")
            future = asyncio.run_coroutine_threadsafe(tracked(), self.loop)
            self._calls.add(future)
        future.add_done_callback(self._calls.discard)
        return future, settled

    def result(self, future: concurrent.futures.Future[_T], settled: threading.Event) -> _T:
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if self.closed:
                raise ClientClosedError("the client was closed during the call") from None
            raise
        except BaseException:
            self.abandon(future, settled)  # e.g. KeyboardInterrupt
            raise

    def abandon(self, future: concurrent.futures.Future[Any], settled: threading.Event) -> None:
        """Stop a call, and let it unwind before going on (a stream's generator is still
        running until then, and cannot be closed)."""
        future.cancel()
        settled.wait(self._UNWIND)

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self.result(*self.submit(coro))

    def iterate(self, items: AsyncGenerator[_T, None]) -> Iterator[_T]:
        self._streams.add(items)

        async def step() -> _T:
            return await items.__anext__()

        try:
            while True:
                try:
                    item = self.run(step())
                except StopAsyncIteration:
                    return
                yield item
        finally:
            if not self.closed and not running(items):
                with contextlib.suppress(ClientClosedError):
                    self.run(items.aclose())

    def close(self, last: Coroutine[Any, Any, None]) -> None:
        """Cancel the calls in progress, close the open streams, run `last` (the client's
        close) and stop the loop."""
        with self._lock:
            if self.closed:
                last.close()
                return
            self.closed = True
            calls = list(self._calls)
        for call in calls:
            call.cancel()
        streams = list(self._streams)

        async def finish() -> None:
            await asyncio.sleep(0)  # the cancelled calls unwind first
            for stream in streams:
                if not running(stream):
                    with contextlib.suppress(Exception):
                        await stream.aclose()
            await last

        if threading.current_thread() is self._thread or self.loop.is_closed():
            last.close()  # collected on its own loop thread: it stops without a goodbye
        else:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(finish(), self.loop).result(self._UNWIND * 6)
        self.stop()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()
            self.loop.close()


def running(stream: AsyncGenerator[Any, None]) -> bool:
    """Whether the generator is in a step now (it cannot be closed then)."""
    return bool(getattr(stream, "ag_running", False))
