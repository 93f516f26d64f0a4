"""The blocking client's event loop thread: closing ends the calls in progress, and an
interrupted stream raises the interrupt and closes its generator."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import AsyncGenerator

import pytest

from trainhub.sdk_errors import ClientClosedError
from trainhub.sdk_loop import LoopThread


async def _nothing() -> None:
    return None


def test_closing_ends_the_calls_other_threads_wait_in() -> None:
    loop = LoopThread()
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            loop.run(asyncio.sleep(60))
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.2)
    loop.close(_nothing())
    caller.join(5)
    assert not caller.is_alive() and isinstance(outcome[0], ClientClosedError)
    coro = asyncio.sleep(0)
    with pytest.raises(ClientClosedError, match="the client is closed"):
        loop.run(coro)


def test_closing_closes_a_stream_left_open() -> None:
    loop = LoopThread()
    closed = threading.Event()

    async def numbers() -> AsyncGenerator[int, None]:
        try:
            for i in range(10):
                yield i
        finally:
            closed.set()

    stream = loop.iterate(numbers())
    assert next(stream) == 0
    loop.close(_nothing())
    assert closed.is_set()


def test_an_interrupted_stream_raises_the_interrupt_and_closes_its_generator() -> None:
    loop = LoopThread()
    closed = threading.Event()

    async def slow() -> AsyncGenerator[int, None]:
        try:
            while True:
                await asyncio.sleep(30)
                yield 1
        finally:
            closed.set()

    # Ctrl-C every 0.3 s until one interrupts the loop: Python drops an interrupt that lands
    # in a finalizer (a weakref callback, a __del__), which a loaded machine makes likelier.
    interrupted = threading.Event()

    def interrupt(signum: int, frame: object) -> None:
        if not interrupted.is_set():
            raise KeyboardInterrupt

    def press() -> None:
        while not interrupted.wait(0.3):
            os.kill(os.getpid(), signal.SIGINT)

    default = signal.signal(signal.SIGINT, interrupt)
    presser = threading.Thread(target=press)
    presser.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in loop.iterate(slow()):
                pass
    finally:
        interrupted.set()
        presser.join()
        signal.signal(signal.SIGINT, default)
        loop.close(_nothing())
    assert closed.wait(5)
