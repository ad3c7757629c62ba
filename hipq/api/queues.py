"""/v1/queues: each queue's config, live counts, pause and resume, forbidden flags,
limits changed at run time."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request

from hipq import waiting
from hipq.api.auth import principal_of, require
from hipq.api.errors import InvalidParameter, StrictJSONRoute
from hipq.api.models import (
    ErrorOut,
    ForbiddenFlagsIn,
    LimitsIn,
    LimitsOut,
    QueueListOut,
    QueueOut,
)
from hipq.batch_loop.limits import (
    LimitsError,
    limits_in_force,
    merged,
    queue_with,
    stages_with,
)
from hipq.service import Service
from hipq.storable_text import NUL_MESSAGE, nul_field
from hipq.store import NotFound

router = APIRouter(prefix="/v1/queues", tags=["queues"], route_class=StrictJSONRoute)
_ERRORS: dict[int | str, dict[str, Any]] = {404: {"model": ErrorOut}}
_BODY_ERRORS: dict[int | str, dict[str, Any]] = {**_ERRORS, 422: {"model": ErrorOut}}
Name = Annotated[str, Path(description="a queue of the configuration")]


async def queue_out(service: Service, name: str) -> QueueOut:
    if name not in service.settings.queues:
        raise NotFound(f"queue {name!r} is not configured", field="name")
    config = service.settings.queues[name]
    counts = await service.store.queue_counts(name, service.clock())
    try:
        config = queue_with(config, counts.limits)
    except LimitsError:
        pass  # overrides that no longer fit the config: its limits are in force
    return QueueOut(
        name=name,
        concurrency=config.concurrency,
        order=config.order,
        round_robin_label=config.round_robin_label,
        batch_interval=config.batch_interval,
        batch_size=config.batch_size,
        throttlers=[s.name for s in service.loops[name].stages],
        paused=counts.paused,
        forbidden_flags=list(counts.forbidden_flags),
        limits=LimitsOut(
            throttlers=limits_in_force(config),
            overrides=counts.limits,
            changed_at=counts.limits_changed_at,
            changed_by=counts.limits_changed_by,
        ),
        owner=counts.lease_owner,
        scheduled=counts.scheduled,
        due=counts.due,
        oldest_due_at=counts.oldest_due_at,
        waiting_reason=waiting.of_queue(
            counts.paused, counts.lease_owner is not None, counts.stats
        ),
        running=counts.running,
        awaiting=counts.awaiting,
        failed=counts.failed,
        capacity_in_use=counts.weight_in_flight,
        in_use_by=counts.stats.get("in_use_by", {}),
        held_by=counts.stats.get("held_by", {}),
        throttler_errors=counts.stats.get("throttler_errors", {}),
        throttler_state=counts.stats.get("throttler_state", {}),
    )


@router.get(
    "",
    dependencies=[Depends(require("read"))],
    response_model=QueueListOut,
    summary="All queues with live counts",
)
async def list_queues(request: Request) -> QueueListOut:
    service: Service = request.app.state.service
    return QueueListOut(
        queues=[await queue_out(service, n) for n in sorted(service.settings.queues)]
    )


@router.get(
    "/{name}",
    dependencies=[Depends(require("read"))],
    response_model=QueueOut,
    responses=_ERRORS,
    summary="One queue",
)
async def get_queue(name: Name, request: Request) -> QueueOut:
    return await queue_out(request.app.state.service, name)


@router.post(
    "/{name}/pause",
    dependencies=[Depends(require("operate"))],
    response_model=QueueOut,
    responses=_ERRORS,
    summary="Stop admitting jobs (in-flight jobs still finish)",
)
async def pause_queue(name: Name, request: Request) -> QueueOut:
    service: Service = request.app.state.service
    await queue_out(service, name)
    await service.store.queue_set_paused(name, True)
    return await queue_out(service, name)


@router.post(
    "/{name}/resume",
    dependencies=[Depends(require("operate"))],
    response_model=QueueOut,
    responses=_ERRORS,
    summary="Admit again",
)
async def resume_queue(name: Name, request: Request) -> QueueOut:
    service: Service = request.app.state.service
    await queue_out(service, name)
    await service.store.queue_set_paused(name, False)
    return await queue_out(service, name)


@router.put(
    "/{name}/forbidden-flags",
    dependencies=[Depends(require("operate"))],
    response_model=QueueOut,
    responses=_BODY_ERRORS,
    summary="Set the flags whose jobs wait on this queue (an empty list allows all)",
)
async def set_forbidden_flags(name: Name, body: ForbiddenFlagsIn, request: Request) -> QueueOut:
    service: Service = request.app.state.service
    await queue_out(service, name)
    await service.store.queue_set_forbidden_flags(name, body.flags)
    return await queue_out(service, name)


def _changed_by(request: Request) -> str:
    principal = principal_of(request)
    return principal.name if principal is not None else "anonymous"


@router.patch(
    "/{name}/limits",
    dependencies=[Depends(require("operate"))],
    response_model=QueueOut,
    responses=_BODY_ERRORS,
    summary="Change the queue's limits at run time (applied by its owner at its next tick)",
)
async def change_limits(name: Name, body: LimitsIn, request: Request) -> QueueOut:
    service: Service = request.app.state.service
    await queue_out(service, name)
    change = body.model_dump(exclude_unset=True)
    bound = service.settings.queues[name].concurrency
    if "concurrency" in change and change["concurrency"] is None and bound is not None:
        # Unlimited would put every job at once on the external system the config
        # protects: a number changes the capacity, DELETE returns to the config's.
        raise InvalidParameter(
            "concurrency",
            f"the config bounds this queue to {bound}: give a number (null, unlimited, is "
            "only for a queue the config leaves unbounded)",
        )
    for name_, value in change.items():
        if where := nul_field(value, name_):  # PostgreSQL's JSON cannot store it
            raise InvalidParameter(where, NUL_MESSAGE)

    def checked(current: dict[str, Any]) -> dict[str, Any]:
        overrides = merged(current, change)
        stages_with(name, service.settings, overrides)  # as start-up builds the chain
        return overrides

    try:
        await service.store.queue_change_limits(
            name, checked, _changed_by(request), service.clock()
        )
    except LimitsError as exc:
        raise InvalidParameter(exc.field, exc.message) from None
    return await queue_out(service, name)


@router.delete(
    "/{name}/limits",
    dependencies=[Depends(require("operate"))],
    response_model=QueueOut,
    responses=_ERRORS,
    summary="Reset the queue's limits to the config's values",
)
async def reset_limits(name: Name, request: Request) -> QueueOut:
    service: Service = request.app.state.service
    await queue_out(service, name)
    await service.store.queue_change_limits(
        name, lambda _: {}, _changed_by(request), service.clock()
    )
    return await queue_out(service, name)
