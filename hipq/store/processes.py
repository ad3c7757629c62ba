"""The registry of live processes (``hipq_processes``): each process's heartbeat, the
queues it may serve, and what it owns now.

A process beats every ``lease_ttl / 3`` (``hipq.process.registry``); the beat also
deletes the rows of processes silent for longer than ``lease_ttl`` and reads what
every process needs to compute the same fair share of the queues.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.store.schema import jobs, processes, queues
from hipq.store.state_guards import IN_FLIGHT_SQL, IN_FLIGHT_VALUES
from hipq.store.transactions import Transactions


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    queues: tuple[str, ...]  # the queues it may serve
    owned: tuple[str, ...] = ()  # the queues whose live lease it holds
    in_flight: int = 0  # running and awaiting jobs of the queues it owns
    # Per owned queue, its jobs by in-flight state: ((queue, {"running": n, ...}), ...).
    in_flight_by_queue: tuple[tuple[str, dict[str, int]], ...] = ()
    version: str | None = None  # the hipq it runs (None: a process older than 0031)


@dataclass(frozen=True, slots=True)
class Registry:
    """What one beat read: the live processes and each queue's live lease owner."""

    processes: tuple[ProcessInfo, ...]
    owners: dict[str, str] = field(default_factory=dict)


class ProcessTable(Transactions):
    async def process_beat(self, me: ProcessInfo, now: datetime, ttl: float) -> Registry:
        """Write this process's heartbeat, forget processes silent for ``ttl`` seconds,
        and read the live processes and the queues' live owners, in one transaction."""
        row = {
            "id": me.id,
            "host": me.host,
            "pid": me.pid,
            "started_at": me.started_at,
            "heartbeat_at": now,
            "queues": list(me.queues),
            "version": me.version,
        }
        async with self._write() as conn:
            await conn.execute(
                delete(processes).where(processes.c.heartbeat_at < now - timedelta(seconds=ttl))
            )
            await conn.execute(
                self.dialect.insert(processes)
                .values(**row)
                .on_conflict_do_update(
                    index_elements=[processes.c.id],
                    set_={"heartbeat_at": now, "queues": list(me.queues), "version": me.version},
                )
            )
            found = await _read_processes(conn)
            owners = await _live_owners(conn, now)
        return Registry(found, owners)

    async def process_remove(self, process_id: str) -> None:
        """A process that stops deletes its row: the others recompute their shares at
        their next beat, without waiting for it to expire."""
        async with self._write() as conn:
            await conn.execute(delete(processes).where(processes.c.id == process_id))

    async def process_clear_all(self) -> None:
        """Forget every process (only where the process guard proves no other runs)."""
        async with self._write() as conn:
            await conn.execute(delete(processes))

    async def process_list(self, now: datetime, ttl: float) -> list[ProcessInfo]:
        """The live processes, each with the queues it owns and their jobs in flight."""
        async with self._read() as conn:
            found = await _read_processes(conn)
            owners = await _live_owners(conn, now)
            counts = (
                await conn.execute(
                    select(jobs.c.queue, jobs.c.state, func.count())
                    .where(jobs.c.state.in_(IN_FLIGHT_SQL))
                    .group_by(jobs.c.queue, jobs.c.state)
                )
            ).all()
        by_state: dict[str, dict[str, int]] = {}
        for queue, state, n in counts:
            by_state.setdefault(queue, dict.fromkeys(IN_FLIGHT_VALUES, 0))[state] = n
        in_flight = {q: sum(states.values()) for q, states in by_state.items()}
        idle = dict.fromkeys(IN_FLIGHT_VALUES, 0)
        owned: dict[str, list[str]] = {}
        for queue, owner in sorted(owners.items()):
            owned.setdefault(owner, []).append(queue)
        load: Counter[str] = Counter()
        for queue, owner in owners.items():
            load[owner] += in_flight.get(queue, 0)
        horizon = now - timedelta(seconds=ttl)
        return [
            ProcessInfo(
                id=p.id,
                host=p.host,
                pid=p.pid,
                started_at=p.started_at,
                heartbeat_at=p.heartbeat_at,
                queues=p.queues,
                version=p.version,
                owned=tuple(owned.get(p.id, ())),
                in_flight=load[p.id],
                in_flight_by_queue=tuple((q, by_state.get(q, idle)) for q in owned.get(p.id, ())),
            )
            for p in found
            if p.heartbeat_at >= horizon
        ]


async def _read_processes(conn: AsyncConnection) -> tuple[ProcessInfo, ...]:
    rows = (await conn.execute(select(processes).order_by(processes.c.started_at))).all()
    return tuple(
        ProcessInfo(
            id=r.id,
            host=r.host,
            pid=r.pid,
            started_at=r.started_at,
            heartbeat_at=r.heartbeat_at,
            queues=tuple(r.queues or ()),
            version=r.version,
        )
        for r in rows
    )


async def _live_owners(conn: AsyncConnection, now: datetime) -> dict[str, str]:
    rows = await conn.execute(
        select(queues.c.name, queues.c.lease_owner).where(
            queues.c.lease_owner.is_not(None), queues.c.lease_expires_at > now
        )
    )
    return {name: owner for name, owner in rows.all()}
