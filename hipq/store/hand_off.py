"""Jobs handed by their queue's owner to another process to send, and what that
process's transports reported of them (``hipq_reports``); see ``hipq.batch_loop.hand_off``.

The owner writes the hand-over in its tick (``QueueBatch.job_hand_off``) and takes
the reports in a later tick (``QueueBatch.report_take``); an executor reads what was
handed to it and writes its reports here, outside any queue's lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select

from hipq.jobs import Job
from hipq.store.rows import row_to_job
from hipq.store.schema import jobs, reports
from hipq.store.state_guards import RUNNING_SQL
from hipq.store.transactions import Transactions
from hipq.store.wakeup import reports_payload


@dataclass(frozen=True, slots=True)
class Report:
    """One thing an executor's transport reported of a job's attempt."""

    queue: str
    job_id: int
    attempt: int
    kind: str  # sent | outcome | heartbeat | checkpoint
    body: Any = None  # the encoded outcome, or the checkpoint's payload
    deadline: datetime | None = None  # a heartbeat's

    @classmethod
    def of_row(cls, row: Any) -> Report:
        return cls(**{name: row._mapping[name] for name in REPORT_COLUMNS})


# The columns a report row carries besides its id, from the table.
REPORT_COLUMNS = tuple(c for c in reports.c.keys() if c != "id")


class HandOffTable(Transactions):
    async def job_handed(self, executor: str) -> list[Job]:
        """The jobs handed to ``executor`` that are still ``running``."""
        async with self._read() as conn:
            rows = await conn.execute(
                select(jobs).where(jobs.c.executor == executor, jobs.c.state == RUNNING_SQL)
            )
            return [row_to_job(r) for r in rows.all()]

    async def job_executors(self, queue: str) -> dict[int, str]:
        """The ``running`` jobs of ``queue`` handed to some process: job id -> process
        (a new owner leaves those of live processes to them)."""
        async with self._read() as conn:
            rows = await conn.execute(
                select(jobs.c.id, jobs.c.executor).where(
                    jobs.c.queue == queue,
                    jobs.c.state == RUNNING_SQL,
                    jobs.c.executor.is_not(None),
                )
            )
            return {job_id: executor for job_id, executor in rows.all()}

    async def report_add(self, items: Sequence[Report]) -> None:
        """Store an executor's reports, one statement, and wake their queues' owners."""
        if not items:
            return
        async with self._write() as conn:
            await conn.execute(insert(reports), [_columns(r) for r in items])
            await self._notify(conn, {reports_payload(r.queue) for r in items})


def _columns(report: Report) -> dict[str, Any]:
    return {name: value for name, value in asdict(report).items() if name in REPORT_COLUMNS}
