"""The application's job handler: what a ``send_welcome`` job does."""

from __future__ import annotations

from hipq.transports.python import JobContext


async def send_welcome(job: JobContext) -> dict[str, str]:
    """The returned value is stored as the job's result."""
    email = job.payload["email"]
    return {"sent_to": email, "subject": f"Welcome, {email.split('@')[0]}"}
