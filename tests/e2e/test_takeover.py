"""A takeover after the owner of a hot queue died uses what is stored: callbacks that
arrived while nobody owned the queue settle their jobs before anything is sent
again, so no answered job is sent twice and the queue's concurrency holds at the
receiver through the takeover.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Servers, wait_for, write_config
from tests.e2e.receiver import Receiver
from tests.e2e.test_hand_off import listed, post_all, queue_done, start
from tests.services import create_database_sync, drop_database_sync, unique_database_name

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

LEASE_TTL = 3.0
CONCURRENCY = 20
JOBS = 160
# The receiver holds each request (and its 202) this long, then calls back: less than
# the lease, so every callback of the dead owner's sends is stored before the takeover.
HOLD = 1.0


@pytest.fixture
def database(postgres_admin_url: str) -> Any:
    name = unique_database_name("hipq_e2e")
    url = create_database_sync(postgres_admin_url, name)
    try:
        yield url
    finally:
        drop_database_sync(postgres_admin_url, name)


def takeover_config(tmp_path: Path, url: str, receiver: str) -> Path:
    job_types = {
        "send": {
            "queue": "hot",
            "correlation_key": "n{payload.n}",
            "outcome": {"field": "status", "success": ["ok"]},
            "timeout": "60s",
            "transport": {"http": {"url": f"{receiver}/work", "timeout": "10s"}},
        }
    }
    queues = {"hot": {"concurrency": CONCURRENCY, "batch_interval": "100ms", "hand_off_above": 0}}
    return write_config(
        tmp_path / "takeover.yaml",
        url,
        queues=queues,
        job_types=job_types,
        lease_ttl=f"{LEASE_TTL:g}s",
        shutdown_grace="10s",
    )


def owner_pid(server: Any) -> int | None:
    hot = next(q for q in server.get("/v1/queues")["queues"] if q["name"] == "hot")
    return int(hot["owner"].rsplit(":", 2)[1]) if hot["owner"] else None


def test_a_takeover_settles_stored_callbacks_before_sending_again(
    database: str, servers: Servers, tmp_path: Path
) -> None:
    with Receiver(hold=HOLD, answer_late=True) as receiver:
        started = start(servers, takeover_config(tmp_path, database, receiver.url), 2)
        pid = wait_for(lambda: owner_pid(started[0]), 3 * LEASE_TTL, "the queue owned")
        owner = next(s for s in started if s.pid == pid)
        survivor = next(s for s in started if s.pid != pid)
        receiver.callback_port = survivor.port  # the balancer sends callbacks to a live one
        jobs = [
            {"type": "send", "payload": {"n": n, "region": "r", "tenant": "t", "w": 1}}
            for n in range(JOBS)
        ]
        ids = post_all(survivor, jobs)
        # Killed while requests it sent itself are at the receiver: their jobs stay
        # `running` (the 202 has not come back), and their callbacks arrive after it died.
        wait_for(
            lambda: receiver.by_port[owner.port] >= 20 and receiver.in_flight_by_port[owner.port],
            60,
            "the owner sends jobs itself",
            interval=0.01,
        )
        owner.kill()
        answered_after_death = receiver.in_flight_by_port[owner.port]
        killed_at = time.monotonic()
        wait_for(
            lambda: queue_done(survivor, "hot"),
            120,
            "every job done",
            interval=0.5,
            describe=survivor.describe,
        )
        print(
            f"\n{answered_after_death} of the owner's sends answered after its SIGKILL; "
            f"done {time.monotonic() - killed_at:.1f}s after it; "
            f"peak in flight {receiver.peak['*']}/{CONCURRENCY}"
        )
        found = listed(survivor, "hot")
    assert answered_after_death > 0
    assert sorted(j["id"] for j in found) == sorted(ids)
    assert {j["state"] for j in found} == {"completed"}
    assert set(receiver.requests) == set(range(JOBS))
    sent_twice = sorted(n for n, count in receiver.requests.items() if count > 1)
    assert sent_twice == []
    assert 0 < receiver.peak["*"] <= CONCURRENCY
