"""The waits between tries of something that failed (the database at start, the LISTEN
connection, a queue loop's re-read after a failed tick, a Kafka client's reconnect):
doubling from a first wait up to a cap, each optionally spread by jitter. A job's own
retries are its retry strategy's (``hipq.retry``); a notification's tries, its
target's (``hipq.outbox``)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class Backoff:
    first: float  # seconds
    cap: float  # seconds
    # A fraction either side of each wait: spreads the reconnects of many processes
    # after an outage.
    jitter: float = 0.0
    failures: int = 0  # in a row, as ``next`` counts them

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` earlier failures in a row (0: the first wait)."""
        wait = min(self.cap, self.first * 2 ** min(failures, 60))
        if self.jitter:
            wait *= random.uniform(1 - self.jitter, 1 + self.jitter)
        return wait

    def next(self) -> float:
        """The wait after one more failure."""
        wait = self.delay(self.failures)
        self.failures += 1
        return wait

    def reset(self) -> None:
        """A success: the next failure waits the first wait again."""
        self.failures = 0
