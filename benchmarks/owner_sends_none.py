"""`hipq serve` whose queue owners hand every claimed job to the other processes,
for ``bench_hand_off.py`` to measure an owner's CPU per job for its tick alone (a
benchmark's probe, not a mode of hipq: owners normally send their share too)."""

from __future__ import annotations

from typing import Any

from hipq.batch_loop.hand_off import HandOff

_choose = HandOff.choose


def _choose_others(self: HandOff, claimed: Any, in_flight: Any) -> dict[int, str]:
    others = tuple(e for e in self.executors if e != self.me)
    if not others:
        return _choose(self, claimed, in_flight)
    saved, self.executors = self.executors, others
    try:
        return _choose(self, claimed, in_flight)
    finally:
        self.executors = saved


HandOff.choose = _choose_others  # type: ignore[method-assign]

if __name__ == "__main__":
    from hipq.commands.main import main

    main()
