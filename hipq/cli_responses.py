"""``hipq responses``: the responses inbox (callbacks and Kafka responses) for an
operator: list with filters, show one, match one to a job by hand (through the API)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

responses_app = typer.Typer(
    help="The responses inbox: list, show, and match a response to a job by hand.",
    no_args_is_help=True,
)

UrlOpt = Annotated[
    str | None,
    typer.Option("--url", envvar="HIPQ_URL", help="hipq's API (default: from the config's server)"),
]
ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", envvar="HIPQ_CONFIG", help="YAML config file")
]


def _call(method: str, url: str | None, config: str | None, path: str, **kwargs: Any) -> Any:
    from hipq import cli  # the shared client helpers; imported late: cli imports this module

    return cli.call(method, cli._base_url(url, config), path, **kwargs)


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
    from hipq import cli

    params: list[tuple[str, Any]] = [("limit", limit)]
    params += [("status", s) for s in status or []]
    params += [("matched", "false")] if unmatched else []
    params += [("key", key)] if key else []
    params += [("cursor", cursor)] if cursor else []
    body = _call("GET", url, config, "/v1/responses", params=params)
    if as_json:
        cli._print(body)
        return
    typer.echo(f"{'ID':>8}  {'STATUS':<9} {'SOURCE':<8} {'JOB':>8}  {'RECEIVED':<32} KEY")
    for r in body["responses"]:
        job = r["forced_job_id"] or r["job_id"] or ""
        typer.echo(
            f"{r['id']:>8}  {r['status']:<9} {r['source'][:8]:<8} {job!s:>8}  "
            f"{r['received_at']:<32} {r['correlation_key']}"
        )
    if body["next_cursor"]:
        typer.echo(f"more: --cursor {body['next_cursor']}")


@responses_app.command("show")
def responses_show(response_id: int, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """One response with its body and headers."""
    from hipq import cli

    cli._print(_call("GET", url, config, f"/v1/responses/{response_id}"))


@responses_app.command("match")
def responses_match(
    response_id: int,
    job_id: Annotated[int, typer.Option("--job", help="the running or awaiting job it answers")],
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Match a response to a job by hand (settled at the job's loop's next tick)."""
    from hipq import cli

    body = {"job_id": job_id}
    cli._print(_call("POST", url, config, f"/v1/responses/{response_id}/match", json=body))
