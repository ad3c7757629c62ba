"""``hipq responses``: the responses inbox (callbacks and Kafka responses) for an
operator: list with filters, show one, match one to a job by hand (through the API)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from hipq.commands import options
from hipq.commands.options import ConfigOpt, UrlOpt, command_group

responses_app = command_group(
    help="The responses inbox: list, show, and match a response to a job by hand.",
    no_args_is_help=True,
)


def _api(url: str | None, config: str | None) -> Any:

    return options.api(url, config)


@responses_app.command("list")
def responses_list(
    status: Annotated[
        list[str] | None,
        typer.Option(help="pending, matched, duplicate, late, expired; repeatable"),
    ] = None,
    unmatched: Annotated[bool, typer.Option(help="only pending, late and expired")] = False,
    key: Annotated[str | None, typer.Option(help="a correlation key")] = None,
    limit: int = 50,
    cursor: str | None = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Responses, newest first."""

    with _api(url, config) as client:
        page = client.list_responses(
            statuses=status,
            matched=False if unmatched else None,
            key=key or None,
            limit=limit,
            cursor=cursor or None,
        )
    if as_json:
        options.print_body(page)
        return
    typer.echo(f"{'ID':>8}  {'STATUS':<9} {'SOURCE':<8} {'JOB':>8}  {'RECEIVED':<32} KEY")
    for r in page.responses:
        job = r.forced_job_id or r.job_id or ""
        received = r.model_dump(mode="json", include={"received_at"})["received_at"]
        typer.echo(
            f"{r.id:>8}  {r.status:<9} {r.source[:8]:<8} {job!s:>8}  "
            f"{received:<32} {r.correlation_key}"
        )
    if page.next_cursor:
        typer.echo(f"more: --cursor {page.next_cursor}")


@responses_app.command("show")
def responses_show(response_id: int, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """One response with its body and headers."""

    with _api(url, config) as client:
        options.print_body(client.get_response(response_id))


@responses_app.command("match")
def responses_match(
    response_id: int,
    job_id: Annotated[int, typer.Option("--job", help="the running or awaiting job it answers")],
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Match a response to a job by hand (settled at the job's loop's next tick)."""

    with _api(url, config) as client:
        options.print_body(client.match_response(response_id, job_id))
