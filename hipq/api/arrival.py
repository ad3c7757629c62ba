"""When a request arrived: the moment the server had its headers (the event loop's clock).

A request's own clock (a long poll's ``?wait=``) starts there, not when its route
first runs: when a thousand requests arrive together, the last one's route runs some
hundreds of milliseconds after its headers came in, and a wait counted from then
would answer that much late as its client sees it. ``hipq serve``'s protocol
(``hipq.api.slow_clients``) stamps the scope; a request without the stamp (the ASGI
app called directly) arrived now.
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

__all__ = ["ARRIVED", "since_arrival", "stamp"]

ARRIVED = "hipq.arrived"


def stamp(scope: Any, loop: asyncio.AbstractEventLoop) -> None:
    scope[ARRIVED] = loop.time()


def since_arrival(scope: MutableMapping[str, Any]) -> float:
    """Seconds since the request arrived (0 without a stamp)."""
    arrived = scope.get(ARRIVED)
    return 0.0 if arrived is None else max(0.0, asyncio.get_running_loop().time() - arrived)
