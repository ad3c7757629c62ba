"""PostgreSQL's whole-batch statements: one statement over column arrays.

An executemany of one statement per row costs the server a plan execution per
row; ``unnest()`` of column arrays lets it do the batch as one join (JSON travels
as text, cast to jsonb). Every column list here is derived: an insert's from the
rows it is given (``hipq.store.rows.new_row``, ``hipq.store.inbox``), the settle's
and the attempt records' from ``hipq.store.statements``, the types from
``hipq.store.schema``; the lease fence is ``statements.FENCE`` compiled.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import JSON, String, Table
from sqlalchemy.dialects.postgresql.psycopg2 import dialect as named_pg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import text

from hipq.lifecycle import State
from hipq.outcomes import Settlement
from hipq.store import statements as st
from hipq.store.driver import DriverStatement
from hipq.store.rows import SHARED_PER_INSERT
from hipq.store.schema import attempts, jobs
from hipq.store.tick import Fence, fence_params


def json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _json_or_null(value: Any) -> str | None:
    return None if value is None else json_dumps(value)


def _state_value(value: State) -> str:
    return value.value


# PostgreSQL's SQL of a SQLAlchemy statement with ``:name`` parameters and no casts,
# to embed in the texts below (``DriverStatement`` then compiles them for asyncpg).
_NAMED = named_pg_dialect(paramstyle="named")


def _sql(element: Any) -> str:
    return str(element.compile(dialect=_NAMED))


def _sql_type(column: Any) -> str:
    """The type an unnested value is cast to: strings as ``text`` (an explicit cast to
    ``varchar(n)`` would cut a longer value short where the column refuses it)."""
    if isinstance(column.type, String):
        return "text"
    return str(column.type.compile(dialect=_NAMED))


class _Arrays:
    """``columns`` of ``table`` sent as one array each and unnested into rows ``alias``.

    JSON travels as text (cast back to jsonb); with ``sql_null`` a None in a nullable
    JSON column is SQL NULL, else JSON null (as SQLAlchemy's JSON type stores it)."""

    def __init__(
        self,
        table: Table,
        columns: Sequence[str],
        alias: str,
        *,
        sql_null: bool = True,
        fields: dict[str, str] | None = None,
        convert: dict[str, Callable[[Any], Any]] | None = None,
        ordinality: bool = False,
    ) -> None:
        casts, scalars, self.select, self._getters = [], [], [], []
        for name in columns:
            column = table.c[name]
            param = f"{alias}_{name}"
            is_json = isinstance(column.type, JSON)
            sql_type = "text" if is_json else _sql_type(column)
            casts.append(f"CAST(:{param} AS {sql_type}[])")
            scalars.append(f"CAST(:{param} AS {sql_type}) AS {name}")
            self.select.append(f"{alias}.{name}::jsonb" if is_json else f"{alias}.{name}")
            conv = (convert or {}).get(name)
            if is_json:
                conv = _json_or_null if sql_null and column.nullable else json_dumps
            field = (fields or {}).get(name, name)
            get = operator.attrgetter(field) if fields is not None else operator.itemgetter(field)
            self._getters.append((param, get, conv))
        names = ", ".join([*columns, "ord"] if ordinality else columns)
        with_ord = " WITH ORDINALITY" if ordinality else ""
        self.from_sql = f"unnest({', '.join(casts)}){with_ord} AS {alias}({names})"
        # The same rows' source when there is one: each value as itself, not an array of
        # one. Encoding a one-element array per column (asyncpg) and unnesting them all
        # (the server) cost a single-job POST about a sixth of its insert.
        self.one_row_sql = f"(SELECT {', '.join(scalars)}) AS {alias}"

    def params(self, rows: Sequence[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for param, get, conv in self._getters:
            values = map(get, rows)
            out[param] = list(map(conv, values) if conv is not None else values)
        return out

    def one_row_params(self, row: Any) -> dict[str, Any]:
        """``params`` of one row, for ``one_row_sql``."""
        out: dict[str, Any] = {}
        for param, get, conv in self._getters:
            value = get(row)
            out[param] = conv(value) if conv is not None else value
        return out


# -- a tick's settlements and their attempt records -------------------------------------

_SETTLED = _Arrays(
    jobs,
    (*st.SETTLE_KEYS, *st.SETTLE_COLUMNS),
    "u",
    fields={"id": "job_id", **{c: c for c in (*st.SETTLE_KEYS[1:], *st.SETTLE_COLUMNS)}},
    convert={"state": _state_value},
)
_RECORDED = _Arrays(attempts, st.ATTEMPT_COLUMNS, "r", fields={c: c for c in st.ATTEMPT_COLUMNS})


def _literal(value: Any) -> str:
    return "NULL" if value is None else str(value).lower()  # None, True, False


def _settle_sql(fence: str) -> str:
    sets = [
        f"{c} = {s}"
        for c, s in zip(st.SETTLE_COLUMNS, _SETTLED.select[len(st.SETTLE_KEYS) :], strict=True)
    ]
    sets += [f"{c} = {_literal(v)}" for c, v in st.SETTLE_RESETS.items()]
    keys = " AND ".join(f"hipq_jobs.{k} = u.{k}" for k in st.SETTLE_KEYS)
    guard = _sql(st.SETTLE_GUARD.sql(jobs.c.state))
    return (
        f"UPDATE hipq_jobs SET {', '.join(sets)}, updated_at = :now"
        f" FROM {fence}{_SETTLED.from_sql} WHERE {keys} AND {guard}"
    )


def _record_sql(fence: str) -> str:
    # A row already there (the same settlement again, after a lost COMMIT reply) is kept.
    return (
        f"INSERT INTO hipq_attempts ({', '.join(st.ATTEMPT_COLUMNS)})"
        f" SELECT {', '.join(_RECORDED.select)} FROM {fence}{_RECORDED.from_sql}"
        " ON CONFLICT DO NOTHING"
    )


# With attempt records, one statement for both tables (two data-modifying parts of one
# WITH: one round trip). With the loop's lease fence: both parts join its row, so a
# fence that matched none writes nothing, and the statement returns no row.
_FENCE_CTE = f"fence AS ({_sql(st.FENCE)})"
_SETTLE = DriverStatement(text(_settle_sql("")))
_SETTLE_AND_RECORD = DriverStatement(
    text(f"WITH settled AS ({_settle_sql('')}), recorded AS ({_record_sql('')}) SELECT 1")
)
_SETTLE_FENCED = DriverStatement(
    text(
        f"WITH {_FENCE_CTE}, settled AS ({_settle_sql('fence, ')})"
        " SELECT paused, forbidden_flags FROM fence"
    )
)
_SETTLE_AND_RECORD_FENCED = DriverStatement(
    text(
        f"WITH {_FENCE_CTE}, settled AS ({_settle_sql('fence, ')}),"
        f" recorded AS ({_record_sql('fence, ')}) SELECT paused, forbidden_flags FROM fence"
    )
)


async def job_settle(
    driver: Any, settlements: Sequence[Settlement], now: datetime, fence: Fence | None = None
) -> Any:
    """Persist settlements and their attempt records on an asyncpg connection, inside
    its open transaction. With ``fence`` the lease fence goes with them: returns the
    queue's row (paused, forbidden flags), None if the fence matched none."""
    params = {"now": now, **_SETTLED.params(settlements)}
    records = [s.record for s in settlements if s.record is not None]
    if records:
        params.update(_RECORDED.params(records))
    if fence is None:
        plain = _SETTLE_AND_RECORD if records else _SETTLE
        await plain.execute_on(driver, params)
        return None
    fenced = _SETTLE_AND_RECORD_FENCED if records else _SETTLE_FENCED
    rows = await fenced.fetch_on(driver, {**params, **fence_params(fence)})
    return rows[0] if rows else None


# -- inserts of new rows ------------------------------------------------------------------


class _Insert:
    """An insert of rows whose columns are their keys, in the order given (ids drawn
    from the table's sequence row by row in ``ord`` order), built once per column list.
    Columns in ``shared`` (the same value in every row) are sent once, not as arrays."""

    def __init__(
        self, table: Table, columns: tuple[str, ...], sql_null: bool, shared: Sequence[str]
    ) -> None:
        self.shared = tuple(c for c in columns if c in shared)
        per_row = tuple(c for c in columns if c not in shared)
        self.arrays = _Arrays(table, per_row, "u", sql_null=sql_null, ordinality=True)
        chosen = dict(zip(per_row, self.arrays.select, strict=True))
        for name in self.shared:
            chosen[name] = f"CAST(:s_{name} AS {_sql_type(table.c[name])})"
        selected = ", ".join(chosen[c] for c in columns)
        head = f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT {selected} FROM "
        # [many rows, one row]: the same insert from the arrays, or from one row's values.
        inserts = (
            f"{head}{self.arrays.from_sql} ORDER BY u.ord RETURNING id",
            f"{head}{self.arrays.one_row_sql} RETURNING id",
        )
        self.alone = tuple(text(sql) for sql in inserts)
        # With the wake-ups, for a connection in autocommit: one round trip where BEGIN,
        # INSERT, NOTIFY and COMMIT took four. A data-modifying WITH always runs;
        # ``sent`` is joined so that the NOTIFYs run too (delivered at commit).
        self.notifying = tuple(
            DriverStatement(
                text(
                    f"WITH ins AS ({sql}), sent AS (SELECT count(pg_notify(:channel, p)) AS n"
                    " FROM unnest(CAST(:notices AS text[])) AS p) SELECT ins.id FROM ins, sent"
                )
            )
            for sql in inserts
        )

    def params(self, rows: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
        """Which of the statements inserts ``rows`` (1: one row, else 0), and its values."""
        first = rows[0]
        shared = {f"s_{c}": first[c] for c in self.shared}
        if len(rows) == 1:
            return 1, {**self.arrays.one_row_params(first), **shared}
        return 0, {**self.arrays.params(rows), **shared}


_inserts: dict[tuple[str, tuple[str, ...]], _Insert] = {}


def _insert_of(table: Table, rows: list[dict[str, Any]]) -> _Insert:
    columns = tuple(rows[0])
    found = _inserts.get((table.name, columns))
    if found is None:
        # A job's nullable JSON (windows, flags, notify) is SQL NULL when None, as the
        # outbox trigger tests it; a response's body and headers are JSON null.
        shared = SHARED_PER_INSERT.get(table.name, ())
        found = _inserts[table.name, columns] = _Insert(table, columns, table is jobs, shared)
    return found


async def job_insert_rows(conn: AsyncConnection, rows: list[dict[str, Any]]) -> list[int]:
    """Insert job rows in one statement; their ids in the order given.

    The ids come from the table's sequence, drawn row by row in ``ord`` order, so
    they increase in the order given: sorting what RETURNING yields restores it.
    """
    insert = _insert_of(jobs, rows)
    which, params = insert.params(rows)
    result = await conn.execute(insert.alone[which], params)
    return sorted(result.scalars().all())


async def insert_rows_notify(
    driver: Any,
    table: Table,
    rows: list[dict[str, Any]],
    channel: str,
    notices: list[str],
) -> list[int]:
    """Insert rows of ``table`` (jobs, responses) and NOTIFY ``notices`` on an asyncpg
    connection outside any transaction, in one statement that commits on its own;
    their ids in the order given."""
    insert = _insert_of(table, rows)
    which, params = insert.params(rows)
    params.update(channel=channel, notices=notices)
    return sorted(row[0] for row in await insert.notifying[which].fetch_on(driver, params))
