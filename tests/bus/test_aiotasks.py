"""Owned background tasks: a crash is reported, an interrupt (a second Ctrl-C) is not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bus.aiotasks import TaskOwner


def _run_task(body: BaseException) -> TaskOwner:
    owner = TaskOwner("test")

    async def fails() -> None:
        raise body

    async def main() -> None:
        owner.spawn(fails(), "body")
        await asyncio.sleep(1)

    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(type(body)):
            loop.run_until_complete(main())
        # What asyncio.run does next: run the loop on while it cancels what is left, which
        # is when the interrupted task's done callbacks run.
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    return owner


def test_a_crash_is_logged_and_an_interrupt_is_not(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="bus.aiotasks")
    # SystemExit stands for KeyboardInterrupt, which pytest would take as the user's Ctrl-C:
    # asyncio re-raises both from the loop, and the owner treats them alike.
    _run_task(SystemExit(130))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "task test:body interrupted" in caplog.text

    owner = TaskOwner("test")

    async def crash() -> None:
        raise ValueError("boom")

    async def main() -> BaseException:
        owner.spawn(crash(), "body")
        assert owner.failed is not None
        return await owner.failed

    assert isinstance(asyncio.run(main()), ValueError)
    assert "task test:body crashed" in caplog.text
