"""``hipq batches``: add jobs as a batch with a completion job, show a batch's counts
(through the REST API, as ``hipq jobs``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from hipq.commands.options import ConfigOpt, UrlOpt, api, fail, parse_json, print_body

batches_app = typer.Typer(
    help="Batches of jobs: their counts, and a job that runs once all finished.",
    no_args_is_help=True,
)


@batches_app.command("add")
def batches_add(
    jobs: Annotated[str, typer.Argument(help='the jobs as a JSON list: [{"type": ...}, ...]')],
    on_complete: Annotated[
        str | None, typer.Option(metavar="TYPE", help="the job type of the completion job")
    ] = None,
    payload: Annotated[
        str, typer.Option(metavar="JSON", help="the completion job's payload")
    ] = "{}",
    notify: Annotated[
        list[str] | None,
        typer.Option(metavar="TARGET", help="told of the completion job's outcome, repeatable"),
    ] = None,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Create jobs as one batch (all or none) and print the batch id and the jobs."""
    listed = parse_json(jobs, "JOBS")
    if not isinstance(listed, list) or not all(isinstance(j, dict) for j in listed):
        fail("JOBS must be a JSON list of job objects")
    completion: dict[str, Any] | None = None
    if on_complete is not None:
        completion = {"type": on_complete, "payload": parse_json(payload, "--payload")}
    with api(url, config) as client:
        print_body(client.add_batch(listed, on_complete=completion, notify=notify))


@batches_app.command("show")
def batches_show(batch_id: int, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """A batch's counts: pending, completed, failed, cancelled."""
    with api(url, config) as client:
        print_body(client.get_batch(batch_id))
