"""``hipq batches``: make a batch (with its jobs, or open for jobs to join), seal it,
show and list batches' counts (through the REST API, as ``hipq jobs``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from hipq.commands.options import ConfigOpt, UrlOpt, api, fail, parse_json, print_body

batches_app = typer.Typer(
    help="Batches of jobs: their counts, and a job and notifications once all finished.",
    no_args_is_help=True,
)

OnCompleteOpt = Annotated[
    str | None, typer.Option(metavar="TYPE", help="the job type of the completion job")
]
PayloadOpt = Annotated[str, typer.Option(metavar="JSON", help="the completion job's payload")]
NotifyOpt = Annotated[
    list[str] | None,
    typer.Option(metavar="TARGET", help="told once the batch finishes, repeatable"),
]


def _completion(on_complete: str | None, payload: str) -> dict[str, Any] | None:
    if on_complete is None:
        return None
    return {"type": on_complete, "payload": parse_json(payload, "--payload")}


@batches_app.command("add")
def batches_add(
    jobs: Annotated[str, typer.Argument(help='the jobs as a JSON list: [{"type": ...}, ...]')],
    on_complete: OnCompleteOpt = None,
    payload: PayloadOpt = "{}",
    notify: NotifyOpt = None,
    batch: Annotated[
        int | None,
        typer.Option(metavar="ID", help="add the jobs to this batch instead of a new one"),
    ] = None,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Create jobs as one new, sealed batch (all or none), or add them to a batch that
    has not finished (--batch); print the batch id and the jobs."""
    listed = parse_json(jobs, "JOBS")
    if not isinstance(listed, list) or not all(isinstance(j, dict) for j in listed):
        fail("JOBS must be a JSON list of job objects")
    completion = _completion(on_complete, payload)
    with api(url, config) as client:
        if batch is None:
            print_body(client.add_batch(listed, on_complete=completion, notify=notify))
            return
        if completion is not None or notify:
            fail("--on-complete, --payload and --notify make a new batch: not with --batch")
        joining: list[Any] = [{**j, "batch_id": batch} for j in listed]
        refs = client.add_jobs(joining)
        print_body({"batch_id": batch, "jobs": [r.model_dump(mode="json") for r in refs]})


@batches_app.command("create")
def batches_create(
    on_complete: OnCompleteOpt = None,
    payload: PayloadOpt = "{}",
    notify: NotifyOpt = None,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Make an open batch and print it: jobs join it (hipq jobs add --batch ID, hipq
    batches add --batch ID) until hipq batches seal ID."""
    with api(url, config) as client:
        completion = _completion(on_complete, payload)
        print_body(client.create_batch(on_complete=completion, notify=notify))


@batches_app.command("seal")
def batches_seal(batch_id: int, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Seal a batch: it finishes once none of its jobs is pending (at once if none is)."""
    with api(url, config) as client:
        print_body(client.seal_batch(batch_id))


@batches_app.command("show")
def batches_show(batch_id: int, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """A batch's counts: pending, completed, failed, cancelled."""
    with api(url, config) as client:
        print_body(client.get_batch(batch_id))


@batches_app.command("list")
def batches_list(
    limit: int = 50,
    cursor: str | None = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Batches, newest first, with their counts (--cursor continues the list)."""
    with api(url, config) as client:
        page = client.list_batches(limit=limit, cursor=cursor)
    if as_json:
        print_body(page)
        return
    typer.echo(
        f"{'ID':>8}  {'STATUS':<9} {'TOTAL':>7} {'PENDING':>7} {'DONE':>7} {'FAILED':>7} "
        f"{'CANCEL':>7}  CREATED"
    )
    for b in page.batches:
        created = b.model_dump(mode="json", include={"created_at"})["created_at"]
        typer.echo(
            f"{b.id:>8}  {b.status:<9} {b.total:>7} {b.pending:>7} {b.completed:>7} "
            f"{b.failed:>7} {b.cancelled:>7}  {created}"
        )
    if page.next_cursor:
        typer.echo(f"more: --cursor {page.next_cursor}")


@batches_app.command("jobs")
def batches_jobs(
    batch_id: int,
    limit: int = 50,
    cursor: str | None = None,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """A batch's jobs, newest first, as JSON (next_cursor continues the list)."""
    with api(url, config) as client:
        print_body(client.list_batch_jobs(batch_id, limit=limit, cursor=cursor))
