"""`hipq schedules ...`: recurring jobs through the REST API (as `hipq jobs` does)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from hipq.commands.options import (
    ConfigOpt,
    UrlOpt,
    api,
    command_group,
    fail,
    label_map,
    parse_json,
    print_body,
)

app = command_group(
    help="Recurring jobs: list, add, change, pause, resume, run now.", no_args_is_help=True
)


@app.command("list")
def schedules_list(
    url: UrlOpt = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Every schedule with its next fire time."""
    with api(url, config) as client:
        found = client.list_schedules()
    if as_json:
        print_body({"schedules": [s.model_dump(mode="json") for s in found]})
        return
    typer.echo(f"{'NAME':<24} {'SOURCE':<7} {'CRON':<16} {'TIMEZONE':<18} NEXT")
    for s in found:
        nxt = "paused" if s.paused else s.model_dump(mode="json")["next_fire_time"]
        if s.paused_reason:  # paused by pause_on_failure: say which job failed
            nxt = f"paused ({s.paused_reason.splitlines()[0][:120]})"
        typer.echo(f"{s.name:<24} {s.source:<7} {s.cron:<16} {s.timezone:<18} {nxt}")


@app.command("show")
def schedules_show(name: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """One schedule."""
    with api(url, config) as client:
        print_body(client.get_schedule(name))


@app.command("add")
def schedules_add(
    name: Annotated[str, typer.Argument(help="the schedule's name")],
    cron: Annotated[str, typer.Argument(help="five fields, e.g. '0 2 * * *'")],
    type: Annotated[str, typer.Option("--type", help="job type from the config")],
    timezone: Annotated[str, typer.Option(help="IANA zone")] = "UTC",
    payload: Annotated[str, typer.Option(help="JSON object; strings may use {fire.date}")] = "{}",
    label: Annotated[list[str] | None, typer.Option(help="name:value, repeatable")] = None,
    priority: Annotated[int | None, typer.Option()] = None,
    queue: Annotated[str | None, typer.Option()] = None,
    job_key: Annotated[str | None, typer.Option(help="e.g. '{schedule}-{fire.date}'")] = None,
    unique_for: Annotated[
        str | None, typer.Option(help="with --job-key: one job per key in this period: 1h")
    ] = None,
    catch_up: Annotated[str, typer.Option(help="none, latest or all")] = "none",
    backfill: Annotated[str, typer.Option(help="how far back missed fire times count")] = "1d",
    overlap: Annotated[str, typer.Option(help="allow, skip, buffer_one or cancel_other")] = "allow",
    pause_on_failure: Annotated[
        bool, typer.Option(help="pause when the latest fire time's job fails for good")
    ] = False,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Create a schedule."""
    job: dict[str, Any] = {"type": type, "payload": parse_json(payload, "--payload")}
    if label:
        job["labels"] = label_map(label)
    for key, value in (
        ("priority", priority),
        ("queue", queue),
        ("job_key", job_key),
        ("unique_for", unique_for),
    ):
        if value is not None:
            job[key] = value
    fields: dict[str, Any] = {
        "timezone": timezone,
        "catch_up": catch_up,
        "backfill": backfill,
        "overlap": overlap,
        "pause_on_failure": pause_on_failure,
    }
    with api(url, config) as client:
        print_body(client.create_schedule(name, cron, job, **fields))


@app.command("change")
def schedules_change(
    name: str,
    cron: Annotated[str | None, typer.Option(help="five fields")] = None,
    timezone: Annotated[str | None, typer.Option(help="IANA zone")] = None,
    job: Annotated[str | None, typer.Option(help="the whole job template, JSON")] = None,
    catch_up: Annotated[str | None, typer.Option(help="none, latest or all")] = None,
    backfill: Annotated[str | None, typer.Option()] = None,
    overlap: Annotated[
        str | None, typer.Option(help="allow, skip, buffer_one or cancel_other")
    ] = None,
    pause_on_failure: Annotated[
        bool | None,
        typer.Option(
            "--pause-on-failure/--no-pause-on-failure",
            help="pause when the latest fire time's job fails for good",
        ),
    ] = None,
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
            "pause_on_failure": pause_on_failure,
        }.items()
        if v is not None
    }
    if job is not None:
        body["job"] = parse_json(job, "--job")
    if not body:
        fail("nothing to change: give at least one option")
    with api(url, config) as client:
        print_body(client.change_schedule(name, **body))


@app.command("delete")
def schedules_delete(name: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Delete a schedule made through the API (its jobs stay)."""
    with api(url, config) as client:
        client.delete_schedule(name)
    typer.echo(f"deleted schedule {name}")


@app.command("pause")
def schedules_pause(name: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Make no jobs until resumed."""
    with api(url, config) as client:
        print_body(client.pause_schedule(name))


@app.command("resume")
def schedules_resume(name: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Fire again from now on."""
    with api(url, config) as client:
        print_body(client.resume_schedule(name))


@app.command("run")
def schedules_run(name: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Make one job of the schedule now."""
    with api(url, config) as client:
        print_body(client.run_schedule(name))


@app.command("next")
def schedules_next(
    name: str,
    count: Annotated[int, typer.Option("-n", "--count", help="how many")] = 10,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """The next fire times."""
    with api(url, config) as client:
        times = client.next_fire_times(name, count)
    for fire in times.model_dump(mode="json")["fire_times"]:
        typer.echo(fire)
