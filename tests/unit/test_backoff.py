"""The one back-off of a process's reconnect and retry loops: doubling from its first
wait to its cap, spread by its jitter, counted by ``next`` and started over by ``reset``."""

from __future__ import annotations

from hipq.backoff import Backoff
from hipq.transports.kafka_client import reconnect_backoff


def test_the_waits_double_up_to_the_cap_and_start_over_after_a_success() -> None:
    backoff = Backoff(first=0.25, cap=2.0)
    assert [backoff.next() for _ in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert backoff.failures == 6
    backoff.reset()
    assert backoff.next() == 0.25
    assert Backoff(first=0.5, cap=30.0).delay(10_000) == 30.0  # no overflow


def test_jitter_spreads_each_wait_within_its_fraction() -> None:
    backoff = reconnect_backoff()
    waits = [backoff.delay(3) for _ in range(200)]
    assert all(4.0 * 0.8 <= w <= 4.0 * 1.2 for w in waits)
    assert len(set(waits)) > 1
