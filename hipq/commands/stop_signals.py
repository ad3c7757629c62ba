"""What SIGTERM and SIGINT do to a running ``hipq serve``.

The first signal drains: the queue loops claim nothing more, the HTTP server stops
accepting connections and finishes the requests it has, and the jobs in flight
(python handlers, HTTP sends, Kafka produces) run to their end within
``shutdown_grace``, their results recorded, before the leases are released. The
second signal stops at once: what still runs is cut off, and the queue's next owner
runs it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator

import uvicorn

from hipq.service import Service

log = logging.getLogger("hipq.serve")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Server(uvicorn.Server):
    """uvicorn's server, whose signals are ``StopSignals``'s.

    uvicorn's own handling would end the process by re-raising the signal after its
    shutdown, and only a second SIGINT (not SIGTERM) would force it.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class StopSignals:
    def __init__(self, service: Service, server: uvicorn.Server) -> None:
        self.service, self.server, self.received = service, server, 0

    def install(self) -> None:
        """On the running event loop, for as long as it runs (the service's stop too)."""
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            # Outside the main thread (an embedding test) signals cannot be set.
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.on_signal, sig)

    def on_signal(self, sig: int) -> None:
        self.received += 1
        name = signal.Signals(sig).name
        if self.received == 1:
            grace = self.service.settings.shutdown_grace
            log.warning("%s: stopping; work in flight may take up to %gs", name, grace)
            self.service.begin_stop()
            self.server.should_exit = True
        else:
            log.warning("%s again: stopping at once", name)
            self.service.stop_now()
            self.server.force_exit = True
