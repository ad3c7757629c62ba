"""The application's job handlers (billing), which its tests exercise through hipq."""

from __future__ import annotations

from typing import Any, Protocol

from hipq.transports.python import JobContext, PermanentError


class Mailer(Protocol):
    async def send(self, to: str, subject: str) -> None: ...


class SmtpMailer:
    async def send(self, to: str, subject: str) -> None:
        raise NotImplementedError("the real mailer: not used by the example")


mailer: Mailer = SmtpMailer()  # the tests put a fake one here


async def send_invoice(job: JobContext) -> dict[str, Any]:
    lines = job.payload.get("lines") or []
    if not lines:  # retrying cannot help: fail at once
        raise PermanentError("an invoice needs at least one line")
    total = sum(line["amount"] for line in lines)
    await mailer.send(job.payload["email"], f"Your invoice: {total:.2f} EUR")
    return {"total": total}


async def nightly_report(job: JobContext) -> dict[str, Any]:
    return {"day": job.payload["day"]}
