"""The example's python handler: imports ``payload.rows`` one by one.

After each row it checkpoints the payload with the count done, so a retry resumes
there. The first attempt stops after ``payload.fail_after`` rows, as a crash or a
lost connection would.
"""

from __future__ import annotations

from typing import Any

from hipq.transports.python import JobContext


async def import_rows(job: JobContext) -> dict[str, Any]:
    rows: list[str] = job.payload["rows"]
    started_at = job.payload.get("done", 0)
    imported = list(job.payload.get("imported", []))
    for index in range(started_at, len(rows)):
        if job.attempt == 1 and index == job.payload.get("fail_after"):
            raise RuntimeError(f"connection lost after {index} rows")
        imported.append(f"{rows[index]} (attempt {job.attempt})")
        # Persisted with the attempt's outcome: the next attempt sees this payload.
        job.checkpoint({**job.payload, "done": index + 1, "imported": imported})
    return {"resumed_at_row": started_at, "imported": imported}
