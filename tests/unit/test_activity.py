"""The background-loop base (``hipq.activity.Loop``): it steps at its interval and when
woken, a step under way finishes within the grace at stop (or is cancelled after it),
and a step that raises is logged once per fault and does not end the loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from hipq.activity import Activity, Loop
from tests.support import eventually

log = logging.getLogger("hipq.test_activity")


class Counting(Loop):
    """A body that counts its steps; each may be held by ``gate`` or made to raise."""

    name = "counting"

    def __init__(self, interval: float, grace: float = 5.0, run: bool = True) -> None:
        super().__init__(log, "counting", interval, run=run, grace=grace)
        self.steps = 0
        self.finished = 0
        self.failing = 0  # the next this many steps raise
        self.gate: asyncio.Event | None = None
        self.closed = 0

    async def run_once(self) -> int:
        self.steps += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            self.failing -= 1
            raise RuntimeError("the body broke")
        self.finished += 1
        return self.steps

    async def stopped(self) -> None:
        self.closed += 1


async def test_it_is_an_activity_and_a_test_drives_it_without_a_task() -> None:
    loop = Counting(interval=3600, run=False)
    assert isinstance(loop, Activity)
    await loop.start()
    assert not loop.running
    assert await loop.run_once() == 1
    await loop.stop()
    assert loop.steps == 1 and loop.closed == 1


async def test_it_steps_every_interval() -> None:
    loop = Counting(interval=0.02)
    await loop.start()
    try:
        await eventually(lambda: loop.steps >= 5, timeout=60)
    finally:
        await loop.stop()
    assert not loop.running


async def test_a_wake_up_steps_at_once_however_long_the_interval() -> None:
    loop = Counting(interval=3600)
    await loop.start()
    try:
        await eventually(lambda: loop.steps == 1, timeout=60)
        await asyncio.sleep(0.05)
        assert loop.steps == 1  # resting for the hour
        loop.wake.set()
        await eventually(lambda: loop.steps == 2, timeout=60)
        loop.wake.set()
        await eventually(lambda: loop.steps == 3, timeout=60)
    finally:
        await loop.stop()


async def test_a_wake_up_during_a_step_is_not_lost() -> None:
    loop = Counting(interval=3600)
    loop.gate = asyncio.Event()
    await loop.start()
    try:
        await eventually(lambda: loop.steps == 1, timeout=60)
        loop.wake.set()  # new input while the step runs
        loop.gate.set()
        await eventually(lambda: loop.steps == 2, timeout=60)
    finally:
        await loop.stop()


async def test_stop_lets_the_step_under_way_finish_within_the_grace() -> None:
    loop = Counting(interval=3600, grace=10)
    loop.gate = asyncio.Event()
    await loop.start()
    await eventually(lambda: loop.steps == 1, timeout=60)
    stopping = asyncio.create_task(loop.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done()  # waits for the step, does not cut it off
    loop.gate.set()
    await asyncio.wait_for(stopping, 10)
    assert (loop.steps, loop.finished, loop.closed) == (1, 1, 1)  # no step after the stop


async def test_a_step_that_outlasts_the_grace_is_cancelled() -> None:
    loop = Counting(interval=3600, grace=0.1)
    loop.gate = asyncio.Event()  # never set
    await loop.start()
    await eventually(lambda: loop.steps == 1, timeout=60)
    await asyncio.wait_for(loop.stop(), 10)
    assert (loop.finished, loop.closed) == (0, 1)
    assert not loop.running


async def test_a_failing_step_is_one_fault_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = Counting(interval=0.01)
    loop.failing = 5
    with caplog.at_level(logging.INFO, logger=log.name):
        await loop.start()
        try:
            await eventually(lambda: loop.finished >= 2, timeout=60)
        finally:
            await loop.stop()
    assert loop.steps >= 7
    lines = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert len(lines) == 2, lines
    assert "counting: failing" in lines[0] and "recovered after 5 failures" in lines[1]


async def test_a_turn_of_none_steps_again_without_resting() -> None:
    class Backlog(Counting):
        async def turn(self) -> float | None:
            await self.run_once()
            return None if self.steps < 50 else self.interval

    loop = Backlog(interval=3600)
    await loop.start()
    try:
        await eventually(lambda: loop.steps == 50, timeout=60)
    finally:
        await loop.stop()


async def test_it_starts_again_after_a_stop() -> None:
    loop = Counting(interval=3600)
    await loop.start()
    await eventually(lambda: loop.steps == 1, timeout=60)
    await loop.stop()
    await loop.start()
    try:
        await eventually(lambda: loop.steps == 2, timeout=60)
    finally:
        await loop.stop()
