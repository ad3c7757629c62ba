"""``hipq jobs`` verbs of an operator: complete, fail, reschedule, delete one job, cancel
or show one by its job_key, and ``hipq jobs bulk ...`` on every job a filter matches
(through the REST API, as the rest of ``hipq jobs``)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from hipq.commands import options
from hipq.commands.options import ConfigOpt, UrlOpt, command_group

bulk_app = command_group(
    help="One verb on every job a filter matches, in bounded steps (--dry-run counts).",
    no_args_is_help=True,
)


def _api(url: str | None, config: str | None) -> Any:

    return options.api(url, config)


def _show(body: Any) -> None:

    options.print_body(body)


def add_verbs(jobs_app: typer.Typer) -> None:
    """Register the per-job verbs on ``hipq jobs``."""

    @jobs_app.command("complete")
    def jobs_complete(
        job_id: int,
        result: Annotated[str, typer.Option(help="the result, as JSON")] = "null",
        url: UrlOpt = None,
        config: ConfigOpt = None,
    ) -> None:
        """Complete an open job with a result (a running one at its queue's next tick)."""

        value = options.parse_json(result, "--result")
        with _api(url, config) as client:
            _show(client.complete_job(job_id, value))

    @jobs_app.command("fail")
    def jobs_fail(
        job_id: int,
        reason: Annotated[str, typer.Option(help="why (kept as last_error)")],
        url: UrlOpt = None,
        config: ConfigOpt = None,
    ) -> None:
        """Fail an open job for good (no retry)."""
        with _api(url, config) as client:
            _show(client.fail_job(job_id, reason))

    @jobs_app.command("reschedule")
    def jobs_reschedule(
        job_id: int,
        run_at: Annotated[str | None, typer.Option(help="RFC 3339 instant")] = None,
        run_in: Annotated[str | None, typer.Option(help="a delay such as 10m")] = None,
        priority: int | None = None,
        reset_attempts: Annotated[bool, typer.Option(help="count attempts from 0")] = False,
        max_attempts: int | None = None,
        url: UrlOpt = None,
        config: ConfigOpt = None,
    ) -> None:
        """Run a scheduled, failed or cancelled job later, or put a running one back."""
        fields = _reschedule_body(run_at, run_in, priority, reset_attempts, max_attempts)
        with _api(url, config) as client:
            _show(client.reschedule_job(job_id, **fields))

    @jobs_app.command("delete")
    def jobs_delete(job_id: int, url: UrlOpt = None, config: ConfigOpt = None) -> None:
        """Delete a finished job and its attempts."""
        with _api(url, config) as client:
            _show(client.delete_job(job_id))

    @jobs_app.command("by-key")
    def jobs_by_key(
        job_key: str,
        cancel: Annotated[bool, typer.Option(help="cancel it")] = False,
        url: UrlOpt = None,
        config: ConfigOpt = None,
    ) -> None:
        """The open job that holds a job_key; --cancel cancels it."""
        with _api(url, config) as client:
            _show(client.cancel_job_by_key(job_key) if cancel else client.get_job_by_key(job_key))


def _reschedule_body(
    run_at: str | None,
    run_in: str | None,
    priority: int | None,
    reset_attempts: bool,
    max_attempts: int | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        k: v
        for k, v in {
            "run_at": run_at,
            "run_in": run_in,
            "priority": priority,
            "max_attempts": max_attempts,
        }.items()
        if v is not None
    }
    if reset_attempts:
        body["reset_attempts"] = True
    return body


def _bulk(
    action: str,
    params: dict[str, Any],
    *,
    queue: str | None,
    state: list[str] | None,
    type: str | None,
    label: list[str] | None,
    id: list[int] | None,
    job_key: str | None,
    created_after: str | None,
    created_before: str | None,
    finished_after: str | None,
    finished_before: str | None,
    error_contains: str | None,
    dry_run: bool,
    wait: bool,
    url: str | None,
    config: str | None,
) -> None:

    flt: dict[str, Any] = {
        k: v
        for k, v in {
            "queue": queue,
            "states": state,
            "type": type,
            "labels": options.label_map(label) if label else None,
            "ids": id,
            "job_key": job_key,
            "created_after": created_after,
            "created_before": created_before,
            "finished_after": finished_after,
            "finished_before": finished_before,
            "error_contains": error_contains,
        }.items()
        if v
    }
    with options.api(url, config) as client:
        if dry_run:
            options.print_body(client.bulk_dry_run(action, flt, **params))  # type: ignore[arg-type]
            return
        op = client.bulk(action, flt, **params)  # type: ignore[arg-type]
        if not wait:
            options.print_body(op)
            return
        # Asked often at first (most operations end within a step or two), then once a
        # second; a progress line only once there is progress, and only when it moved.
        pause, shown = FIRST_POLL_SECONDS, (0, 0)
        while op.state == "running":
            time.sleep(pause)
            pause = min(pause * 2, LAST_POLL_SECONDS)
            op = client.get_bulk(op.id)
            if op.state == "running" and (op.matched, op.changed) not in {(0, 0), shown}:
                shown = (op.matched, op.changed)
                typer.echo(
                    f"bulk {op.id} {action}: {op.matched} matched, {op.changed} changed, "
                    f"{op.requested} requested, {op.skipped} skipped",
                    err=True,
                )
    options.print_body(op)
    if op.state == "failed":
        options.fail(f"bulk operation {op.id} failed: {op.error}")


# How long `--wait` first waits before asking for the progress, and at most.
FIRST_POLL_SECONDS = 0.05
LAST_POLL_SECONDS = 1.0

Queue = Annotated[str | None, typer.Option(help="jobs of this queue")]
States = Annotated[list[str] | None, typer.Option("--state", help="repeatable")]
Type = Annotated[str | None, typer.Option("--type", help="jobs of this type")]
Labels = Annotated[list[str] | None, typer.Option("--label", help="name:value, repeatable")]
Ids = Annotated[list[int] | None, typer.Option("--id", help="repeatable")]
JobKey = Annotated[str | None, typer.Option(help="jobs with this job_key")]
Instant = Annotated[str | None, typer.Option(help="RFC 3339 instant")]
ErrorText = Annotated[str | None, typer.Option(help="text in the job's last_error")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="only count the matching jobs")]
Wait = Annotated[bool, typer.Option(help="follow the progress until it ends")]


def _verb(action: str, doc: str) -> Any:
    def command(
        queue: Queue = None,
        state: States = None,
        type: Type = None,
        label: Labels = None,
        id: Ids = None,
        job_key: JobKey = None,
        created_after: Instant = None,
        created_before: Instant = None,
        finished_after: Instant = None,
        finished_before: Instant = None,
        error_contains: ErrorText = None,
        reason: Annotated[str | None, typer.Option(help="cancel, fail: why")] = None,
        result: Annotated[str | None, typer.Option(help="complete: the result, JSON")] = None,
        run_at: Annotated[str | None, typer.Option(help="retry, reschedule")] = None,
        run_in: Annotated[str | None, typer.Option(help="retry, reschedule: e.g. 10m")] = None,
        priority: Annotated[int | None, typer.Option(help="reschedule")] = None,
        reset_attempts: Annotated[bool, typer.Option(help="reschedule")] = False,
        max_attempts: Annotated[int | None, typer.Option(help="reschedule")] = None,
        dry_run: DryRun = False,
        wait: Wait = True,
        url: UrlOpt = None,
        config: ConfigOpt = None,
    ) -> None:

        params: dict[str, Any] = {}
        if reason is not None:
            params["reason"] = reason
        if result is not None:
            params["result"] = options.parse_json(result, "--result")
        params.update(_reschedule_body(run_at, run_in, priority, reset_attempts, max_attempts))
        _bulk(
            action,
            params,
            queue=queue,
            state=state,
            type=type,
            label=label,
            id=id,
            job_key=job_key,
            created_after=created_after,
            created_before=created_before,
            finished_after=finished_after,
            finished_before=finished_before,
            error_contains=error_contains,
            dry_run=dry_run,
            wait=wait,
            url=url,
            config=config,
        )

    command.__doc__ = doc
    return command


for _action, _doc in (
    ("cancel", "Cancel the matching open jobs (--reason)."),
    ("retry", "Run the matching failed or cancelled jobs again."),
    ("reschedule", "Move the matching jobs (--run-at/--run-in, --priority, ...)."),
    ("complete", "Complete the matching open jobs (--result)."),
    ("fail", "Fail the matching open jobs for good (--reason)."),
    ("delete", "Delete the matching finished jobs."),
):
    bulk_app.command(_action)(_verb(_action, _doc))


@bulk_app.command("show")
def bulk_show(bulk_id: int, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """A bulk operation and its progress."""
    with _api(url, config) as client:
        _show(client.get_bulk(bulk_id))
