"""The dashboard's pages: server-rendered HTML over the store's reads.

The pages only read. Every button on them calls the public REST API from the
browser (``static/dashboard.js``), so an action is authorized and validated
exactly as the same call from a script would be.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from hipq.api import auth
from hipq.api import schedules as schedules_api
from hipq.api.paging import parse_id
from hipq.api.why_waiting import explained
from hipq.dashboard import access, busy, display
from hipq.dashboard.candidates import Candidate, suggest
from hipq.dashboard.filters import (
    STATES,
    FilterError,
    bulk_filter,
    page_link,
    parse_job_filter,
    state_link,
)
from hipq.dashboard.history import DEFAULT_PERIOD, PERIODS, history
from hipq.dashboard.overview import queue_views
from hipq.durations import format_duration
from hipq.lifecycle import State
from hipq.service import Service
from hipq.store import NotFound
from hipq.store.records import Response
from hipq.version import __version__

PREFIX = "/dashboard"
RESPONSE_STATUSES = ("pending", "late", "expired", "duplicate", "matched")
RESPONSES_PAGE = 50
RESPONSE_COUNT_LIMIT = 1000  # a tab counts this many at most ("1000+")
FAILED_RETRY_LIMIT = 10_000  # job ids one bulk retry carries (POST /v1/jobs/bulk's limit)
RECENT_FIRES = 5  # fire times shown per schedule
BATCHES_PAGE = 50  # batches per page, and jobs per page of a batch

# The pages load nothing but their own files, run no inline script and no eval: a
# value that slipped past escaping still could not run, and a CDN could not creep in.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

FAVICON = Path(__file__).parent / "static" / "favicon.svg"
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
router = APIRouter(prefix=PREFIX, include_in_schema=False, dependencies=access.page_access())
# Open to anyone: the sign-in page, and / (a redirect).
open_router = APIRouter(include_in_schema=False)


def _when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


templates.env.filters["when"] = _when
templates.env.filters["pretty"] = _pretty
templates.env.filters["yes_no"] = display.yes_no
templates.env.filters["duration"] = display.duration
templates.env.filters["utc_input"] = display.utc_input
templates.env.filters["as_config"] = format_duration  # as a form field takes it back
templates.env.filters["run_time"] = display.run_time
templates.env.filters["in_zone"] = display.in_zone
templates.env.filters["visible"] = display.visible
templates.env.globals["job_duration"] = display.job_duration
templates.env.globals["version"] = __version__


def _service(request: Request) -> Service:
    return request.app.state.service


def _page(request: Request, name: str, http_status: int = 200, **context: Any) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    principal = auth.principal_of(request)
    context.update(
        root=root,
        base=root + PREFIX,
        page=name.removesuffix(".html"),
        here=here,
        signed_in=principal.name if principal is not None and principal.authenticated else None,
    )
    response = templates.TemplateResponse(request, name, context, status_code=http_status)
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    return response


@router.get("", response_class=HTMLResponse)
async def overview(request: Request) -> HTMLResponse:
    service = _service(request)
    now = service.clock()
    # The live processes: each queue's owner above is one of them.
    found = await service.store.process_list(now, service.settings.lease_ttl)
    return _page(
        request, "overview.html", queues=await queue_views(service, now), processes=found, now=now
    )


@router.get("/processes", response_class=HTMLResponse)
async def processes_page(request: Request) -> HTMLResponse:
    """Each live ``hipq serve``: where it runs, since when, its last heartbeat, the
    queues it may serve and those it owns with their jobs in flight; and the queues
    no live process owns now."""
    service = _service(request)
    now = service.clock()
    found = await service.store.process_list(now, service.settings.lease_ttl)
    owned = {q for p in found for q in p.owned}
    return _page(
        request,
        "processes.html",
        processes=found,
        busy=busy.place(await service.store.job_busy(), found),
        unowned=sorted(q for q in service.settings.queues if q not in owned),
        now=now,
        lease_ttl=service.settings.lease_ttl,
    )


@router.get("/jobs", response_class=HTMLResponse)
async def jobs_page(request: Request) -> HTMLResponse:
    service = _service(request)
    context: dict[str, Any] = {
        "queues": sorted(service.settings.queues),
        "types": sorted(service.settings.job_types),
        "all_states": STATES,
    }
    try:
        form = parse_job_filter(request.query_params)
    except FilterError as exc:
        return _page(request, "jobs.html", 422, error=exc, form=None, **context)
    page = await service.store.job_page(form.query)
    names = [form.query.queue] if form.query.queue else context["queues"]
    counts = {s: 0 for s in ("scheduled", "due", "running", "awaiting", "failed")}
    for name in names:
        if name in service.settings.queues:
            c = await service.store.queue_counts(name, service.clock())
            for s in counts:
                counts[s] += getattr(c, s)
    # A tab per state (as Oban Web's), counted where the count is cheap: open and
    # failed jobs (finished ones may be millions).
    tabs = [(None, "all", None)] + [(s, s, counts.get(s)) for s in STATES]
    tabs.insert(2, ("retrying", "retrying", None))  # after scheduled: a part of it
    return _page(
        request,
        "jobs.html",
        form=form,
        result=page,
        jobs=await explained(service.store, service.clock, page.jobs),
        now=service.clock(),
        bulk_filter=bulk_filter(form.query),
        counts=counts,
        tabs=[(state_link(request.query_params, s), name, n) for s, name, n in tabs],
        next_link=page_link(request.query_params, page.next_cursor) if page.next_cursor else None,
        **context,
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(request: Request, job_id: str) -> HTMLResponse:
    service = _service(request)
    store = service.store
    wanted = parse_id(job_id)
    if wanted is None:
        return _page(request, "missing.html", 404, what=f"job {job_id!r}")
    try:
        job = await store.job_get(wanted)
    except NotFound:
        return _page(request, "missing.html", 404, what=f"job {job_id}")
    attempts = await store.job_attempts(job.id)
    (job,) = await explained(store, service.clock, [job])
    found = await store.response_by_key(job.correlation_key) if job.correlation_key else []
    return _page(
        request,
        "job.html",
        job=job,
        now=service.clock(),
        attempts=attempts,
        notifications=await store.notification_list(job_id=job.id, limit=100),
        dependents=await store.job_dependents(job.id),
        batch=await store.batch_get(job.batch_id) if job.batch_id else None,
        responses=found,
        open=job.state in (State.SCHEDULED, State.RUNNING, State.AWAITING),
        retryable=job.state in (State.FAILED, State.CANCELLED),
        # POST /v1/jobs/{id}/reschedule takes every state but completed.
        reschedulable=job.state != State.COMPLETED,
    )


def _cursor(request: Request) -> int | str | None:
    """The page's ``?cursor=`` as an id (None: the first page); the text if it is not one."""
    text = request.query_params.get("cursor")
    if text is None:
        return None
    found = parse_id(text)
    return text if found is None else found


@router.get("/batches", response_class=HTMLResponse)
async def batches_page(request: Request) -> HTMLResponse:
    cursor = _cursor(request)
    if isinstance(cursor, str):
        return _page(request, "missing.html", 404, what=f"cursor {cursor!r}")
    found = await _service(request).store.batch_list(cursor, BATCHES_PAGE)
    older = found[-1].id if len(found) == BATCHES_PAGE else None
    return _page(request, "batches.html", batches=found, older=older)


@router.get("/batches/{batch_id}", response_class=HTMLResponse)
async def batch_page(request: Request, batch_id: str) -> HTMLResponse:
    store = _service(request).store
    wanted, cursor = parse_id(batch_id), _cursor(request)
    if wanted is None:
        return _page(request, "missing.html", 404, what=f"batch {batch_id!r}")
    if isinstance(cursor, str):
        return _page(request, "missing.html", 404, what=f"cursor {cursor!r}")
    try:
        batch = await store.batch_get(wanted)
    except NotFound:
        return _page(request, "missing.html", 404, what=f"batch {batch_id}")
    found = await store.batch_jobs(batch.id, cursor, BATCHES_PAGE)
    return _page(
        request,
        "batch.html",
        batch=batch,
        jobs=await explained(store, _service(request).clock, found),
        # One row per target, written once when it finishes.
        notifications=await store.notification_list(batch_id=batch.id, limit=100),
        older=found[-1].id if len(found) == BATCHES_PAGE else None,
    )


@router.get("/history", response_class=HTMLResponse)
async def history_page(request: Request) -> HTMLResponse:
    name = request.query_params.get("period") or DEFAULT_PERIOD
    period = PERIODS.get(name)
    if period is None:
        shown = ", ".join(PERIODS)
        return _page(request, "missing.html", 404, what=f"period {name!r} (one of {shown})")
    service = _service(request)
    found = await history(service, period, service.clock())
    return _page(request, "history.html", h=found, periods=list(PERIODS))


@router.get("/failed", response_class=HTMLResponse)
async def failed_page(request: Request) -> HTMLResponse:
    groups, sampled = await _service(request).store.job_error_groups()
    return _page(
        request, "failed.html", groups=groups, sampled=sampled, retry_limit=FAILED_RETRY_LIMIT
    )


@router.get("/responses", response_class=HTMLResponse)
async def responses_page(request: Request) -> HTMLResponse:
    store = _service(request).store
    status = request.query_params.get("status") or "pending"
    if status not in (*RESPONSE_STATUSES, "parked"):
        shown = ", ".join((*RESPONSE_STATUSES, "parked"))
        return _page(request, "missing.html", 404, what=f"status {status!r} (one of {shown})")
    before = request.query_params.get("before") or None
    after_id = parse_id(before) if before is not None else None
    if before is not None and after_id is None:
        return _page(request, "missing.html", 404, what=f"page before {before!r}")
    found: list[Response] = []
    parked: list[dict[str, Any]] = []
    open_keys: dict[str, int] = {}
    candidates: dict[int, list[Candidate]] = {}
    if status == "parked":
        parked = await store.parked_list(after_id, RESPONSES_PAGE)
        ids = [p["id"] for p in parked]
    else:
        found = await store.response_list((status,), None, after_id, RESPONSES_PAGE)
        ids = [r.id for r in found]
        if status in ("pending", "late", "expired"):
            open_keys = await store.job_open_keys(sorted({r.correlation_key for r in found}))
        unknown = [r for r in found if r.correlation_key not in open_keys and not r.forced_job_id]
        if status == "pending":
            candidates = await suggest(_service(request), unknown)
    return _page(
        request,
        "responses.html",
        status=status,
        statuses=(*RESPONSE_STATUSES, "parked"),
        counts=await store.response_counts(
            (*RESPONSE_STATUSES, "parked"), RESPONSE_COUNT_LIMIT + 1
        ),
        count_limit=RESPONSE_COUNT_LIMIT,
        responses=found,
        parked=parked,
        open_keys=open_keys,
        candidates=candidates,
        older=ids[-1] if len(ids) == RESPONSES_PAGE else None,
    )


@router.get("/schedules", response_class=HTMLResponse)
async def schedules_page(request: Request) -> HTMLResponse:
    # The API's own reads: the same next fire times and fires as GET /v1/schedules.
    listed = (await schedules_api.list_schedules(request)).schedules
    fires = {
        s.name: (await schedules_api.schedule_fires(s.name, request, RECENT_FIRES)).fires
        for s in listed
    }
    types = sorted(_service(request).settings.job_types)
    return _page(request, "schedules.html", schedules=listed, fires=fires, types=types)


@open_router.get("/")
async def root(request: Request) -> RedirectResponse:
    return RedirectResponse(request.scope.get("root_path", "") + PREFIX)


@open_router.get("/favicon.ico")
async def favicon() -> FileResponse:
    # Browsers ask for it on pages that name no icon (JSON answers, /metrics).
    return FileResponse(FAVICON, media_type="image/svg+xml")


@open_router.get(PREFIX + "/login", response_class=HTMLResponse)
async def login_page(request: Request) -> HTMLResponse:
    base = request.scope.get("root_path", "") + PREFIX
    wanted = request.query_params.get("next") or base
    # Only back into the dashboard: a link to /dashboard/login?next=https://... must not
    # send a person who signs in elsewhere.
    if not (wanted == base or wanted.startswith(base + "/") or wanted.startswith(base + "?")):
        wanted = base
    return _page(request, "login.html", next=wanted)
