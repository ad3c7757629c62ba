"""What hipq's Kafka clients share: the request producer and the response consumer.

Both connect to the same brokers under the same client id, reconnect with the same
backoff and close the same careful way; neither reaches into the other's module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from hipq.backoff import Backoff
from hipq.config import KafkaConfig

log = logging.getLogger("hipq.kafka")

CLIENT_ID = "hipq"


def client_options(kafka: KafkaConfig) -> dict[str, Any]:
    """The aiokafka arguments every hipq client (producer or consumer) passes."""
    return {"bootstrap_servers": kafka.bootstrap_servers, "client_id": CLIENT_ID}


def reconnect_backoff() -> Backoff:
    """The waits between a Kafka client's tries to reach the broker; jitter spreads the
    reconnects of many processes after a broker restart."""
    return Backoff(first=0.5, cap=30.0, jitter=0.2)


async def close_quietly(client: Any) -> None:
    """Stop an aiokafka producer or consumer without letting its errors escape."""
    try:
        # A producer flushes on stop: do not wait long for a broker that is away.
        await asyncio.wait_for(client.stop(), 5.0)
        return
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # we are being cancelled, not just the client's own tasks
        error: BaseException = asyncio.CancelledError()
    except Exception as exc:
        error = exc
    log.debug("closing %s: %r", type(client).__name__, error)
    # aiokafka's stop() can fail half-way (a fetch cancelled in its retry backoff
    # raises out of it) before it closes its connections: close them still, or the
    # client's metadata task keeps trying to reach the broker forever.
    inner = getattr(client, "_client", None) or getattr(client, "client", None)
    if inner is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(inner.close(), 5.0)
