"""Where SQLite and PostgreSQL must differ: one ``Dialect`` object, chosen once at start.

Everything else in the store is shared SQL.

- SQLite: one file, WAL with synchronous=FULL (a committed job survives power
  loss), write transactions begin IMMEDIATE so that a read-then-write transaction
  never fails halfway on a lock upgrade, and a busy timeout instead of errors.
  One process per file, guarded by a file lock.
- PostgreSQL: FOR UPDATE SKIP LOCKED on the due scan (an API edit holding a row
  never blocks the loop), and NOTIFY to wake the owner of a queue in another process.

Both bound a transaction begun under ``time_budget`` (the API's requests): SQLite
by its busy timeout, PostgreSQL by ``statement_timeout`` and ``lock_timeout``.
"""

from __future__ import annotations

import select
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import orjson
from sqlalchemy import Select, Table, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql import text

from hipq.store import tick_sql, unnest
from hipq.store.asyncpg_adapter import driver_in_transaction, pooled_socket
from hipq.store.driver import any_of
from hipq.store.held_connections import Held, HeldConnections, ended_unsent
from hipq.store.process_guard import PgListener, ProcessGuard, SqliteFileLock
from hipq.store.records import StoreSetupError
from hipq.store.schema import attempts, jobs, responses
from hipq.store.statements import insert_sql
from hipq.store.tick import ClaimRead, DueScanOf, Fence, Tick
from hipq.store.tick_sql import PostgresTick
from hipq.store.tick_sqlite import SqliteTick
from hipq.store.wakeup import CHANNEL

SQLITE_BUSY_TIMEOUT_MS = 30_000
# A new PostgreSQL connection that has not answered within this gives up (asyncpg's
# default is 60 s: a blackholed database would hold a request that long).
PG_CONNECT_TIMEOUT_SECONDS = 5.0

# Seconds a transaction begun in this context may wait for the database; None: no
# bound beyond the engine's own (the loops, upkeep, migrations).
_budget: ContextVar[float | None] = ContextVar("hipq_db_budget", default=None)


@contextmanager
def time_budget(seconds: float | None) -> Iterator[None]:
    """Bound each transaction begun inside (statement and lock waits) by ``seconds``."""
    token = _budget.set(seconds)
    try:
        yield
    finally:
        _budget.reset(token)


def budget_seconds() -> float | None:
    """The ``time_budget`` in force here, if any."""
    return _budget.get()


def _budget_ms() -> int | None:
    seconds = _budget.get()
    return None if seconds is None else max(1, int(seconds * 1000))


__all__ = [
    "Dialect",
    "PostgresDialect",
    "SqliteDialect",
    "StoreSetupError",
    "create_engine",
    "time_budget",
]


class Dialect(ABC):
    """The engine-specific parts of the store. Subclasses override what differs and
    must supply the abstract methods."""

    name: str
    # Whether this process is the database's only user once its guard holds: then
    # leases left by a crashed process are cleared at start instead of waited out.
    single_process: bool

    def engine_options(self) -> dict[str, Any]:
        return {}

    def prepare(self, engine: AsyncEngine) -> None:
        """Set up each new connection of ``engine``."""
        return None  # nothing to do by default

    async def close(self) -> None:
        """Release what the dialect opened itself (the store closes its engine)."""
        return None  # nothing by default

    def budgeted(self, engine: AsyncEngine) -> AsyncEngine:
        """The engine for transactions begun under ``time_budget`` (the API's)."""
        return engine  # the same engine by default

    # Whether the store's reads run without a transaction, each statement on its own.
    reads_autocommit = False

    async def check(self, conn: AsyncConnection) -> None:
        """Refuse to run on a database that would not keep what hipq promises."""
        return None  # nothing to do by default

    @abstractmethod
    def insert(self, table: Table) -> Any:
        """An INSERT with ``on_conflict_do_nothing``."""

    async def write_probe(self, conn: AsyncConnection) -> None:
        """Inside a write transaction that is rolled back: fail unless a job could be
        written now (the jobs table is not locked against writers)."""
        return None  # nothing to do by default

    def attempt_insert(self) -> Any:
        """An INSERT of attempt rows that skips one already stored: settling the same
        attempt again (after a lost COMMIT reply) records it once."""
        return self.insert(attempts).on_conflict_do_nothing()

    def for_update(self, query: Select[Any]) -> Select[Any]:
        """Lock the rows a read-then-write transaction reads."""
        return query

    def skip_locked(self, query: Select[Any]) -> Select[Any]:
        """Lock the rows read, passing over those another transaction holds."""
        return query

    def id_in(self, column: Any, ids: list[int]) -> Any:
        return column.in_(ids)

    async def notify(self, conn: AsyncConnection, payloads: set[str]) -> None:
        """Wake the loops of other processes (delivered at commit)."""
        return None  # nothing to do by default

    @abstractmethod
    async def job_insert_rows(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> list[int]:
        """Insert job rows; their ids in the order given."""

    async def job_insert_committed(
        self, engine: AsyncEngine, rows: list[dict[str, Any]], payloads: Sequence[str]
    ) -> list[int] | None:
        """Insert job rows and send their wake-ups as one statement that commits on its
        own (no BEGIN/COMMIT round trips); their ids in order. None where the engine
        has no such statement: the caller then uses a transaction."""
        return None

    async def response_insert_committed(
        self, engine: AsyncEngine, rows: list[dict[str, Any]], payload: str
    ) -> list[int] | None:
        """Insert pending responses and send ``payload`` as one statement that commits
        on its own; their ids in order. None where the engine has no such statement."""
        return None

    @abstractmethod
    async def tick(self, conn: AsyncConnection) -> Tick:
        """The hot statements of a queue's tick in ``conn``'s transaction
        (``hipq.store.tick``)."""

    # Whether ``claim_at_scan`` claims (else it returns None at once).
    claims_at_scan = False

    async def claim_at_scan(
        self, engine: AsyncEngine, scan: DueScanOf, fence: Fence
    ) -> ClaimRead | None:
        """The lease fence, the due scan and the claim of the due jobs no stage could
        hold (``hipq.store.statements.claim_at_scan``) as one statement that commits on
        its own. None where the engine has none: SQLite's tick costs no network round
        trips, and its loop claims in a tick."""
        return None

    async def lock_mirror(self, conn: AsyncConnection) -> None:
        """Make writers of the config's mirror (``hipq.store.job_types_mirror``) take
        turns, so that two configs never interleave into a mixture."""
        return None  # SQLite's write transactions are serialised already

    @abstractmethod
    def process_guard(self, database_url: str, on_payload: Callable[[str], None]) -> ProcessGuard:
        """What a serving process holds while it uses the database."""

    async def tables_empty(self, conn: AsyncConnection, tables: Sequence[Table]) -> None:
        """Delete every row of ``tables`` (given parents first)."""
        for table in reversed(tables):
            await conn.execute(table.delete())


def sqlite_error(sql: str, exc: sqlite3.Error) -> sa_exc.DBAPIError:
    """A sqlite3 error raised by the driver itself, as SQLAlchemy would raise it."""
    if isinstance(exc, sqlite3.IntegrityError):
        return sa_exc.IntegrityError(sql, None, exc)
    if isinstance(exc, sqlite3.OperationalError):
        return sa_exc.OperationalError(sql, None, exc)
    return sa_exc.DBAPIError(sql, None, exc)


class SqliteDialect(Dialect):
    name = "sqlite"
    single_process = True

    def __init__(self) -> None:
        # Per engine and column list: the insert and its columns' bind processors.
        self._insert_plans: dict[
            tuple[int, str, tuple[str, ...]], tuple[str, tuple[str, ...], list[Any]]
        ] = {}

    def prepare(self, engine: AsyncEngine) -> None:
        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take over transaction control from the driver so BEGIN can be IMMEDIATE.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
            # A job cancelled because a job it runs after failed cancels its own
            # dependents: the same trigger again (alembic 0022).
            cur.execute("PRAGMA recursive_triggers=ON")
            cur.close()
            _record.info["hipq_busy_ms"] = SQLITE_BUSY_TIMEOUT_MS

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            # The busy timeout bounds the wait for the write lock at BEGIN IMMEDIATE:
            # the budget's under ``time_budget``, else the default again.
            busy_ms = _budget_ms() or SQLITE_BUSY_TIMEOUT_MS
            info = conn.connection.info
            if info.get("hipq_busy_ms") != busy_ms:
                conn.exec_driver_sql(f"PRAGMA busy_timeout={busy_ms}")
                info["hipq_busy_ms"] = busy_ms
            mode = "IMMEDIATE" if conn.get_execution_options().get("hipq_write") else "DEFERRED"
            conn.exec_driver_sql(f"BEGIN {mode}")

    async def check(self, conn: AsyncConnection) -> None:
        mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
        sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
        version = (await conn.exec_driver_sql("select sqlite_version()")).scalar()
        if str(mode).lower() != "wal" or int(str(sync)) != 2:
            raise StoreSetupError(
                f"SQLite runs with journal_mode={mode}, synchronous={sync}; "
                "hipq needs WAL and FULL (2)"
            )
        if tuple(int(p) for p in str(version).split(".")[:2]) < (3, 35):
            raise StoreSetupError(
                f"SQLite {version} is too old: hipq needs 3.35 or newer (RETURNING)"
            )

    def insert(self, table: Table) -> Any:
        return sqlite.insert(table)

    # for_update, skip_locked: SQLite serialises writers (BEGIN IMMEDIATE), so there
    # is nothing to lock.

    async def tick(self, conn: AsyncConnection) -> Tick:
        return SqliteTick(conn, self.attempt_insert())

    async def job_insert_committed(
        self, engine: AsyncEngine, rows: list[dict[str, Any]], payloads: Sequence[str]
    ) -> list[int] | None:
        return await self._insert_committed(engine, jobs, rows)

    async def response_insert_committed(
        self, engine: AsyncEngine, rows: list[dict[str, Any]], payload: str
    ) -> list[int] | None:
        return await self._insert_committed(engine, responses, rows)

    async def _insert_committed(
        self, engine: AsyncEngine, table: Table, rows: list[dict[str, Any]]
    ) -> list[int]:
        """Insert ``rows`` in a transaction of their own; their ids in order.

        On aiosqlite every call is a hop to the connection's thread and back, and
        SQLAlchemy's adapter makes four of each statement (cursor, execute, fetch,
        close): a single-job POST's transaction took 13. On the driver connection it
        takes five: BEGIN IMMEDIATE, the insert, its last rowid, COMMIT, and the
        pool's reset. The values are converted by the columns' own bind processors,
        exactly as SQLAlchemy would store them."""
        sql, columns, convert = self._insert_plan(engine, table, tuple(rows[0]))
        params = [
            tuple(c(r[k]) if c else r[k] for k, c in zip(columns, convert, strict=True))
            for r in rows
        ]
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver: Any = raw.driver_connection
            busy_ms = _budget_ms() or SQLITE_BUSY_TIMEOUT_MS
            try:
                if raw.info.get("hipq_busy_ms") != busy_ms:
                    await driver.execute(f"PRAGMA busy_timeout={busy_ms}")
                    raw.info["hipq_busy_ms"] = busy_ms
                await driver.execute("BEGIN IMMEDIATE")
                try:
                    await driver.executemany(sql, params)
                    last = (await driver.execute_fetchall("SELECT last_insert_rowid()"))[0][0]
                    await driver.commit()
                except BaseException:
                    await driver.rollback()
                    raise
            except sqlite3.Error as exc:
                raise sqlite_error(sql, exc) from exc
        # Writers are serialised and INTEGER PRIMARY KEY takes max(rowid) + 1: the
        # ids are consecutive, ending at the last (as ``job_insert_rows``).
        return list(range(last - len(rows) + 1, last + 1))

    def _insert_plan(
        self, engine: AsyncEngine, table: Table, columns: tuple[str, ...]
    ) -> tuple[str, tuple[str, ...], list[Any]]:
        """The INSERT of ``columns``, the order of its parameters, and each one's bind
        processor (or None)."""
        key = (id(engine), table.name, columns)
        plan = self._insert_plans.get(key)
        if plan is None:
            dialect = engine.sync_engine.dialect
            sql, order = insert_sql(table, columns, "qmark")
            plan = (sql, order, [table.c[name].type.bind_processor(dialect) for name in order])
            self._insert_plans[key] = plan
        return plan

    async def job_insert_rows(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> list[int]:
        # SQLAlchemy can only return ids in order by inserting row by row on SQLite.
        # Writers are serialised (BEGIN IMMEDIATE) and INTEGER PRIMARY KEY takes
        # max(rowid) + 1, so one executemany gives consecutive ids ending at the last.
        await conn.execute(jobs.insert(), rows)
        last = (await conn.exec_driver_sql("SELECT last_insert_rowid()")).scalar_one()
        return list(range(last - len(rows) + 1, last + 1))

    def process_guard(self, database_url: str, on_payload: Callable[[str], None]) -> ProcessGuard:
        return SqliteFileLock(database_url)


# The budget in force as this PostgreSQL connection's session setting, if any.
_SESSION_BUDGET = "hipq_session_budget_ms"
# An engine whose transactions' budget is the session's (``PostgresDialect.budgeted``).
_SESSION_SCOPED = "hipq_session_budget"


def _timeouts_sql(budget_ms: int | None, local: bool) -> str:
    """statement_timeout and lock_timeout to ``budget_ms``; None: the server's defaults."""
    if budget_ms is None:
        return (
            "SELECT set_config(name, reset_val, false) FROM pg_settings "
            "WHERE name IN ('statement_timeout', 'lock_timeout')"
        )
    scope = "true" if local else "false"
    return (
        f"SELECT set_config('statement_timeout', '{budget_ms}', {scope}), "
        f"set_config('lock_timeout', '{budget_ms}', {scope})"
    )


def _set_timeouts(conn: Any, budget_ms: int | None, local: bool) -> None:
    conn.exec_driver_sql(_timeouts_sql(budget_ms, local))


# Connections beyond the first that the one-statement insert may open at once.
MAX_CONCURRENT_PLAIN_INSERTS = 4
# A pooled connection returned longer ago than this is pinged before its next use.
PING_AFTER_IDLE_SECONDS = 1.0
_RETURNED_AT = "hipq_returned_at"


def _checkout_ping(engine: AsyncEngine) -> None:
    """A pooled connection that a restart or a reset killed is replaced before use
    instead of failing the transaction that drew it, as ``pool_pre_ping`` does, but
    the ping's round trip is paid only when the connection may be dead: when its
    socket has something to read while nobody asked (the server's end, a reset, or
    a message to look at: one poll, no round trip), or when it sat in the pool for
    PING_AFTER_IDLE_SECONDS (a server restarted without the end reaching us yet).
    Under load connections come back within milliseconds and are not pinged."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        record.info[_RETURNED_AT] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkin")
    def _on_checkin(dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info[_RETURNED_AT] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        returned = record.info.get(_RETURNED_AT)
        fresh = returned is not None and time.monotonic() - returned < PING_AFTER_IDLE_SECONDS
        if fresh and _quiet(pooled_socket(dbapi_conn)):
            return
        try:
            dbapi_conn.ping()
        except Exception as exc:
            # The pool discards this connection and draws (or opens) another.
            raise sa_exc.DisconnectionError(str(exc)) from exc


def _usable_without_ping(held: Held, idle_seconds: float) -> bool:
    """A held connection may be used again as the checkout ping would let it pass."""
    return idle_seconds < PING_AFTER_IDLE_SECONDS and _quiet(
        pooled_socket(held.raw.dbapi_connection)
    )


def _quiet(sock: Any | None) -> bool:
    """An open connection's socket with nothing waiting on it."""
    if sock is None:
        return False
    poll = select.poll()
    poll.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    return not poll.poll(0)


Result = TypeVar("Result")


async def _on_held(
    inserts: HeldConnections, statement: Callable[[Any], Awaitable[Result]]
) -> Result:
    async with inserts.connection() as held:
        # asyncpg runs a statement outside a transaction as its own. SQLAlchemy begins
        # nothing here, so its ``begin`` event does not set the budget: done here, when
        # it changes.
        budget_ms = _budget_ms()
        if held.raw.info.get(_SESSION_BUDGET) != budget_ms:
            await held.driver.execute(_timeouts_sql(budget_ms, local=False))
            held.raw.info[_SESSION_BUDGET] = budget_ms
        return await statement(held.driver)


class PostgresDialect(Dialect):
    name = "postgresql"
    single_process = False
    # A read transaction under READ COMMITTED takes a new snapshot for each statement,
    # as statements outside a transaction do: BEGIN and COMMIT were two round trips of
    # every read (three of the five of GET /v1/jobs/{id}) that bought nothing.
    reads_autocommit = True

    def __init__(self) -> None:
        # The one-statement insert's own small pool (``job_insert_committed``).
        self._insert_engines: dict[int, HeldConnections] = {}
        # The API's transactions' own pool (``budgeted``).
        self._budget_engines: dict[int, AsyncEngine] = {}

    def engine_options(self) -> dict[str, Any]:
        # The API's concurrent requests and the loops share the pool; a small pool
        # makes each request beyond it open a new connection. No pre-ping on every
        # checkout (a round trip per transaction): ``prepare`` pings only a
        # connection that may have died (see ``_checkout_ping``).
        return {
            "pool_size": 20,
            "max_overflow": 20,
            # The most recently returned connection first: at low traffic the one in
            # use stays warm (not pinged), the others age out of use together.
            "pool_use_lifo": True,
            "connect_args": {"timeout": PG_CONNECT_TIMEOUT_SECONDS},
        }

    def prepare(self, engine: AsyncEngine) -> None:
        _checkout_ping(engine)

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            budget_ms = _budget_ms()
            info = conn.connection.info
            options = conn.get_execution_options()
            if options.get(_SESSION_SCOPED) or options.get("isolation_level") == "AUTOCOMMIT":
                # The API's own pool (``budgeted``), where every transaction has the
                # same budget, or a statement that is its own transaction: the budget
                # is the session's, set only when it changes (no round trip per
                # transaction).
                if info.get(_SESSION_BUDGET) != budget_ms:
                    _set_timeouts(conn, budget_ms, local=False)
                    info[_SESSION_BUDGET] = budget_ms
                return
            if info.get(_SESSION_BUDGET) is not None:  # left by an autocommit insert
                _set_timeouts(conn, None, local=False)
                info[_SESSION_BUDGET] = None
            if budget_ms is not None:  # local to the transaction: gone at its end
                _set_timeouts(conn, budget_ms, local=True)

    async def write_probe(self, conn: AsyncConnection) -> None:
        # ROW EXCLUSIVE is what an INSERT takes; NOWAIT: a lock held against writers
        # fails at once instead of waiting.
        await conn.exec_driver_sql("LOCK TABLE hipq_jobs IN ROW EXCLUSIVE MODE NOWAIT")

    def insert(self, table: Table) -> Any:
        return postgresql.insert(table)

    def for_update(self, query: Select[Any]) -> Select[Any]:
        return query.with_for_update()

    def skip_locked(self, query: Select[Any]) -> Select[Any]:
        return query.with_for_update(skip_locked=True)

    def id_in(self, column: Any, ids: list[int]) -> Any:
        return any_of(column, "ids_array", ids)

    async def tick(self, conn: AsyncConnection) -> Tick:
        return PostgresTick(conn, await driver_in_transaction(conn))

    claims_at_scan = True

    async def claim_at_scan(
        self, engine: AsyncEngine, scan: DueScanOf, fence: Fence
    ) -> ClaimRead | None:
        # One round trip where BEGIN, the fenced scan, the claim and COMMIT took four:
        # the loop's idle wake-up for a new job (``hipq.batch_loop.loop``).
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver: Any = raw.driver_connection
            if raw.info.get(_SESSION_BUDGET) is not None:  # left by a budgeted statement
                await driver.execute(_timeouts_sql(None, local=False))
                raw.info[_SESSION_BUDGET] = None
            return await tick_sql.claim_at_scan(driver, scan, fence)

    async def lock_mirror(self, conn: AsyncConnection) -> None:
        # SHARE ROW EXCLUSIVE leaves the SQL function's reads unblocked.
        await conn.execute(
            text("LOCK TABLE hipq_job_types, hipq_queue_capacities IN SHARE ROW EXCLUSIVE MODE")
        )

    async def notify(self, conn: AsyncConnection, payloads: set[str]) -> None:
        for payload in sorted(payloads):
            await conn.execute(text("SELECT pg_notify(:ch, :q)"), {"ch": CHANNEL, "q": payload})

    async def job_insert_rows(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> list[int]:
        return await unnest.job_insert_rows(conn, rows)

    async def job_insert_committed(
        self, engine: AsyncEngine, rows: list[dict[str, Any]], payloads: Sequence[str]
    ) -> list[int] | None:
        def insert(driver: Any) -> Awaitable[list[int] | None]:
            return unnest.insert_rows_notify(driver, jobs, rows, CHANNEL, list(payloads))

        return await self._autocommit(engine, insert)

    async def response_insert_committed(
        self, engine: AsyncEngine, rows: list[dict[str, Any]], payload: str
    ) -> list[int] | None:
        def insert(driver: Any) -> Awaitable[list[int] | None]:
            return unnest.insert_rows_notify(driver, responses, rows, CHANNEL, [payload])

        return await self._autocommit(engine, insert)

    async def _autocommit(
        self, engine: AsyncEngine, statement: Callable[[Any], Awaitable[Result]]
    ) -> Result:
        """``statement`` run on an asyncpg connection, as one statement that commits on
        its own (``hipq.store.driver``), with the request's budget in force.

        One autocommit statement is as durable as a transaction of one statement.
        These connections are a pool of their own: the budget is a session setting
        here, which a transaction without one would reset (a round trip each, and one
        more to set it again) on a connection the two shared. Between statements they
        stay out of that pool (``hipq.store.held_connections``). A statement refused
        before it was sent, on a connection whose server process had just ended it,
        goes once more on another."""
        inserts = self._insert_engines.get(id(engine))
        if inserts is None:
            # Group commit writes one group at a time, per writer (jobs, responses).
            inserts = HeldConnections(
                create_engine(
                    engine.url, self, pool_size=2, max_overflow=MAX_CONCURRENT_PLAIN_INSERTS
                ),
                _usable_without_ping,
                PG_CONNECT_TIMEOUT_SECONDS,
            )
            self._insert_engines[id(engine)] = inserts
        try:
            return await _on_held(inserts, statement)
        except Exception as exc:
            if not ended_unsent(exc):
                raise
        return await _on_held(inserts, statement)

    def process_guard(self, database_url: str, on_payload: Callable[[str], None]) -> ProcessGuard:
        return PgListener(database_url, on_payload, self._delivered_in_process)

    def _delivered_in_process(self, backend: int) -> bool:
        """Whether a NOTIFY from server process ``backend`` came from this process's own
        one-statement writes, whose callers deliver their wake-ups in process once
        committed (``JobTable``, ``InboxTable``): the echo would wake the loops twice."""
        return any(backend in held.backends for held in self._insert_engines.values())

    def budgeted(self, engine: AsyncEngine) -> AsyncEngine:
        # A transaction-local budget cost a round trip (``set_config``) at every BEGIN
        # of a request; in a pool of its own the budget stays set in each session, and
        # the loops' transactions (no budget) never meet it.
        budgeted = self._budget_engines.get(id(engine))
        if budgeted is None:
            budgeted = create_engine(
                engine.url,
                self,
                pool_size=10,
                max_overflow=20,
                execution_options={_SESSION_SCOPED: True},
            )
            self._budget_engines[id(engine)] = budgeted
        return budgeted

    async def close(self) -> None:
        held = list(self._insert_engines.values())
        engines = [*(h.engine for h in held), *self._budget_engines.values()]
        self._insert_engines, self._budget_engines = {}, {}
        for connections in held:
            await connections.close()
        for own in engines:
            await own.dispose()

    async def tables_empty(self, conn: AsyncConnection, tables: Sequence[Table]) -> None:
        names = ", ".join(t.name for t in tables)
        await conn.exec_driver_sql(f"TRUNCATE {names} RESTART IDENTITY CASCADE")


_DIALECTS: dict[str, type[Dialect]] = {"sqlite": SqliteDialect, "postgresql": PostgresDialect}


def dialect_for(url: str | URL) -> Dialect:
    backend = make_url(url).get_backend_name()
    if backend not in _DIALECTS:
        raise StoreSetupError(f"unsupported database {backend!r}: use SQLite or PostgreSQL")
    return _DIALECTS[backend]()


def json_loads(value: str | bytes | int | float) -> Any:
    """A stored JSON value on SQLite, which gives a JSON column NUMERIC affinity: a value
    that is a bare number (a callback's body ``5``) is stored as a number and read back
    as one."""
    if isinstance(value, int | float):
        return value
    return orjson.loads(value)


def create_engine(url: str | URL, dialect: Dialect | None = None, **kwargs: Any) -> AsyncEngine:
    dialect = dialect or dialect_for(url)
    for name, value in dialect.engine_options().items():
        kwargs.setdefault(name, value)
    # Statements' parameters are jobs' payloads and results: never in an error's text
    # (which a log line or a traceback shows), on every engine the store opens.
    kwargs.setdefault("hide_parameters", True)
    # PostgreSQL's JSON arrives as text, always: orjson reads it with no step between
    # (three values of each job the due scan reads).
    loads = orjson.loads if dialect.name == "postgresql" else json_loads
    engine = create_async_engine(
        url, json_serializer=unnest.json_dumps, json_deserializer=loads, **kwargs
    )
    dialect.prepare(engine)
    return engine
