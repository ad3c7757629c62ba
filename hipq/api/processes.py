"""/v1/processes: the live hipq processes sharing the database, what each runs and its load."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from hipq.api.auth import require
from hipq.api.errors import StrictJSONRoute
from hipq.api.models import ProcessListOut, ProcessOut
from hipq.service import Service

router = APIRouter(prefix="/v1/processes", tags=["processes"], route_class=StrictJSONRoute)


@router.get(
    "",
    dependencies=[Depends(require("read"))],
    response_model=ProcessListOut,
    summary="The live processes: the queues each runs and its jobs in flight",
)
async def list_processes(request: Request) -> ProcessListOut:
    service: Service = request.app.state.service
    found = await service.store.process_list(service.clock(), service.settings.lease_ttl)
    return ProcessListOut(
        processes=[
            ProcessOut(
                id=p.id,
                host=p.host,
                pid=p.pid,
                started_at=p.started_at,
                heartbeat_at=p.heartbeat_at,
                queues=list(p.queues),
                version=p.version,
                owned=list(p.owned),
                in_flight=p.in_flight,
                in_flight_by_queue=dict(p.in_flight_by_queue),
            )
            for p in found
        ]
    )
