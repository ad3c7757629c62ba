"""`hipq schedules ...`: recurring jobs through the REST API (as `hipq jobs` does)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from hipq.cli import ConfigOpt, UrlOpt, _base_url, _labels, _parse_json, _print, call, fail

app = typer.Typer(
    help="Recurring jobs: list, add, change, pause, resume, run now.", no_args_is_help=True
)


def _api(url: str | None, config: str | None) -> str:
    return _base_url(url, config)


@app.command("list")
def schedules_list(
    url: UrlOpt = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Every schedule with its next fire time."""
    body = call("GET", _api(url, config), "/v1/schedules")
    if as_json:
        _print(body)
        return
    typer.echo(f"{'NAME':<24} {'SOURCE':<7} {'CRON':<16} {'TIMEZONE':<18} NEXT")
    for s in body["schedules"]:
        nxt = "paused" if s["paused"] else s["next_fire_time"]
        typer.echo(f"{s['name']:<24} {s['source']:<7} {s['cron']:<16} {s['timezone']:<18} {nxt}")


@app.command("show")
def schedules_show(name: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """One schedule."""
    _print(call("GET", _api(url, config), f"/v1/schedules/{name}"))


@app.command("add")
def schedules_add(
    name: Annotated[str, typer.Argument(help="the schedule's name")],
    cron: Annotated[str, typer.Argument(help="five fields, e.g. '0 2 * * *'")],
    type: Annotated[str, typer.Option("--type", help="job type from the config")],
    timezone: Annotated[str, typer.Option(help="IANA zone")] = "UTC",
    payload: Annotated[str, typer.Option(help="JSON object; strings may use {fire.date}")] = "{}",
    label: Annotated[list[str] | None, typer.Option(help="name=value, repeatable")] = None,
    priority: Annotated[int | None, typer.Option()] = None,
    queue: Annotated[str | None, typer.Option()] = None,
    job_key: Annotated[str | None, typer.Option(help="e.g. '{schedule}-{fire.date}'")] = None,
    catch_up: Annotated[str, typer.Option(help="none, latest or all")] = "none",
    backfill: Annotated[str, typer.Option(help="how far back missed fire times count")] = "1d",
    overlap: Annotated[str, typer.Option(help="allow or skip")] = "allow",
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Create a schedule."""
    job: dict[str, Any] = {"type": type, "payload": _parse_json(payload, "--payload")}
    if label:
        job["labels"] = _labels(label)
    for key, value in (("priority", priority), ("queue", queue), ("job_key", job_key)):
        if value is not None:
            job[key] = value
    body = {
        "name": name,
        "cron": cron,
        "timezone": timezone,
        "job": job,
        "catch_up": catch_up,
        "backfill": backfill,
        "overlap": overlap,
    }
    _print(call("POST", _api(url, config), "/v1/schedules", json=body))


@app.command("change")
def schedules_change(
    name: str,
    cron: Annotated[str | None, typer.Option(help="five fields")] = None,
    timezone: Annotated[str | None, typer.Option(help="IANA zone")] = None,
    job: Annotated[str | None, typer.Option(help="the whole job template, JSON")] = None,
    catch_up: Annotated[str | None, typer.Option(help="none, latest or all")] = None,
    backfill: Annotated[str | None, typer.Option()] = None,
    overlap: Annotated[str | None, typer.Option(help="allow or skip")] = None,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Change a schedule made through the API."""
    body: dict[str, Any] = {
        k: v
        for k, v in {
            "cron": cron,
            "timezone": timezone,
            "catch_up": catch_up,
            "backfill": backfill,
            "overlap": overlap,
        }.items()
        if v is not None
    }
    if job is not None:
        body["job"] = _parse_json(job, "--job")
    if not body:
        fail("nothing to change: give at least one option")
    _print(call("PATCH", _api(url, config), f"/v1/schedules/{name}", json=body))


@app.command("delete")
def schedules_delete(name: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Delete a schedule made through the API (its jobs stay)."""
    call("DELETE", _api(url, config), f"/v1/schedules/{name}")
    typer.echo(f"deleted schedule {name}")


@app.command("pause")
def schedules_pause(name: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Make no jobs until resumed."""
    _print(call("POST", _api(url, config), f"/v1/schedules/{name}/pause"))


@app.command("resume")
def schedules_resume(name: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Fire again from now on."""
    _print(call("POST", _api(url, config), f"/v1/schedules/{name}/resume"))


@app.command("run")
def schedules_run(name: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Make one job of the schedule now."""
    _print(call("POST", _api(url, config), f"/v1/schedules/{name}/run"))


@app.command("next")
def schedules_next(
    name: str,
    count: Annotated[int, typer.Option("-n", "--count", help="how many")] = 10,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """The next fire times."""
    body = call("GET", _api(url, config), f"/v1/schedules/{name}/next", params={"count": count})
    for fire in body["fire_times"]:
        typer.echo(fire)
