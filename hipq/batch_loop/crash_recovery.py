"""What a queue's new owner does with the jobs it finds ``running`` after a crash: their
request may or may not have left. Each job type chooses (``after_crash``, as effectum
offers both): ``resend`` sends it again at once (at-least-once; the default), ``retry``
counts the interrupted attempt as failed, so the retry strategy's delay (and
max_attempts) applies before it is sent again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hipq.job_types import JobTypeInfo
from hipq.jobs import Job
from hipq.outcomes import Failed
from hipq.retry import AttemptError

INTERRUPTED = "interrupted: the process running it stopped before it ended"


def resumed(
    running: Iterable[Job], job_types: Mapping[str, JobTypeInfo]
) -> tuple[list[Job], list[tuple[Job, Failed]]]:
    """The jobs to send again now, and the jobs whose attempt ends as failed."""
    resend: list[Job] = []
    interrupted: list[tuple[Job, Failed]] = []
    for job in running:
        info = job_types.get(job.type)
        if info is not None and info.config.after_crash == "retry":
            interrupted.append((job, Failed(AttemptError(INTERRUPTED, kind="interrupted"))))
        else:
            resend.append(job)
    return resend, interrupted
