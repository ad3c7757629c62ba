"""What the HTTP server's connections share: how many each peer holds, the refusals
(at ``server.max_connections``, or beyond a peer's ``max_connections_per_peer``)
logged once per interval, and whether the server refuses work now (``/readyz``).

One client that opens connections faster than they end would otherwise take every
slot of ``max_connections`` from everyone, and each refusal would be a WARNING line
(tens of thousands during one flood).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable

__all__ = ["REFUSING", "ConnectionLimits"]

log = logging.getLogger("hipq.api")

# The scope key where a probe finds why the server refuses work now (None: it does not).
REFUSING = "hipq.refusing"
# A refusal at the cap this recently keeps /readyz at 503: the count of connections
# moves with every one that ends, the flood that filled it does not.
READY_AFTER_REFUSAL_SECONDS = 5.0
# Refusals are logged at most once per this many seconds, with their count.
LOG_EVERY_SECONDS = 60.0

AT_CAP = "server.max_connections"
PER_PEER = "server.max_connections_per_peer"


class ConnectionLimits:
    def __init__(
        self,
        per_peer: int | None,
        unlimited: Iterable[str] = (),
        log_every: float = LOG_EVERY_SECONDS,
    ) -> None:
        self.per_peer = per_peer
        self.unlimited = frozenset(unlimited)
        self.log_every = log_every
        self.peers: Counter[str] = Counter()
        self._cap_refused_at = float("-inf")
        self._unlogged: Counter[str] = Counter()
        self._logged_at = float("-inf")
        self._flush: asyncio.TimerHandle | None = None

    def admit(self, peer: str | None) -> bool:
        """Count a new connection of ``peer``; False (not counted) if it holds its
        share already."""
        if peer is None or self.per_peer is None or peer in self.unlimited:
            return True
        if self.peers[peer] >= self.per_peer:
            return False
        self.peers[peer] += 1
        return True

    def release(self, peer: str) -> None:
        self.peers[peer] -= 1
        if self.peers[peer] <= 0:
            del self.peers[peer]

    def refused(self, limit: str, loop: asyncio.AbstractEventLoop) -> None:
        """A connection or request refused at ``limit``: logged now if nothing was in
        the last interval, else counted into the line logged at its end."""
        now = loop.time()
        if limit == AT_CAP:
            self._cap_refused_at = now
        self._unlogged[limit] += 1
        if now - self._logged_at >= self.log_every:
            self._log(now)
        elif self._flush is None:
            self._flush = loop.call_at(self._logged_at + self.log_every, self._log_later, loop)

    def refusing(self, loop: asyncio.AbstractEventLoop, at_cap: bool) -> str | None:
        """Why the server refuses work now (at its cap, or it was within a few
        seconds); None if it does not."""
        if at_cap or loop.time() - self._cap_refused_at < READY_AFTER_REFUSAL_SECONDS:
            return f"refusing requests: {AT_CAP} connections are held"
        return None

    def _log_later(self, loop: asyncio.AbstractEventLoop) -> None:
        self._flush = None
        if self._unlogged:
            self._log(loop.time())

    def _log(self, now: float) -> None:
        counts = ", ".join(f"{n} at {limit}" for limit, n in sorted(self._unlogged.items()))
        log.warning(
            "refused connections with 503 (%s) since the last such line; at most one line each %gs",
            counts,
            self.log_every,
        )
        self._unlogged.clear()
        self._logged_at = now
