"""finish_or_cancel: a task asked to stop ends its current work; a stuck one is cancelled."""

from __future__ import annotations

import asyncio

from hipq.stopping import finish_or_cancel


async def test_a_task_that_stops_in_time_finishes_its_work_uncancelled() -> None:
    stop = asyncio.Event()
    log: list[str] = []

    async def ticking() -> None:
        while not stop.is_set():
            log.append("begin")
            await asyncio.sleep(0.05)  # a transaction in progress when stop is asked
            log.append("commit")

    task = asyncio.create_task(ticking())
    await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(finish_or_cancel([task], grace=2), 5)
    assert not task.cancelled()
    assert log == ["begin", "commit"]


async def test_a_task_that_does_not_stop_is_cancelled_after_the_grace() -> None:
    async def stuck() -> None:
        await asyncio.sleep(3600)

    task = asyncio.create_task(stuck())
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(finish_or_cancel([task], grace=0.1), 5)
    assert task.cancelled()
    assert asyncio.get_running_loop().time() - started < 2


async def test_no_tasks_is_nothing_to_wait_for() -> None:
    await asyncio.wait_for(finish_or_cancel([]), 1)
