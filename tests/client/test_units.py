"""The client's pure parts: its models against the API's, Retry-After, which failures
are sent again, and the pauses of wait()."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from pydantic import BaseModel

from hipq.api import models as api
from hipq.api import schedules, workers
from hipq.api.responses import ResponseListOut, ResponseOut
from hipq.client import Client, NotJson, calls, models
from hipq.client.calls import Backoff, Call, Waiter

# Each answer model of the client and the API model it mirrors.
MIRRORS: dict[type[BaseModel], type[BaseModel]] = {
    models.Attempt: api.AttemptOut,
    models.Heartbeat: api.HeartbeatOut,
    models.Job: api.JobOut,
    models.JobRef: api.JobRef,
    models.JobPage: api.JobListOut,
    models.Queue: api.QueueOut,
    models.Response: ResponseOut,
    models.ResponsePage: ResponseListOut,
    models.BulkCount: api.BulkCountOut,
    models.BulkOperation: api.BulkOut,
    models.Schedule: schedules.ScheduleOut,
    models.FireTimes: schedules.FireTimesOut,
    models.Fire: schedules.FireOut,
    models.Fires: schedules.FiresOut,
    models.ScheduleRun: schedules.RunOut,
    models.FetchedJob: workers.FetchedJob,
    models.WorkerReport: workers.ReportAccepted,
    models.WorkerBeat: workers.BeatAccepted,
    models.ReportResult: workers.ReportResult,
    models.Batch: api.BatchOut,
    models.BatchPage: api.BatchListOut,
}
# Client models that are no mirror: what ``add_batch`` returns is a batch POST's answer
# narrowed to that call (its batch_id always set).
NOT_MIRRORS = {models.AddedBatch}


def test_every_client_answer_model_is_checked_against_the_api() -> None:
    # A client model added without its pair above would be checked by nothing.
    answers = {
        c
        for c in vars(models).values()
        if isinstance(c, type) and issubclass(c, models._Out) and c is not models._Out
    }
    assert answers == set(MIRRORS) | NOT_MIRRORS


@pytest.mark.parametrize(("mirror", "served"), list(MIRRORS.items()))
def test_the_client_models_have_the_fields_the_api_answers(
    mirror: type[BaseModel], served: type[BaseModel]
) -> None:
    # A field added to the API must be typed in the client too (it would otherwise only
    # arrive as an untyped extra).
    assert list(mirror.model_fields) == list(served.model_fields)
    for name, spec in served.model_fields.items():
        assert mirror.model_fields[name].is_required() == spec.is_required(), name


def test_job_fields_cover_the_api_input() -> None:
    sent = set(models.NewJob.__annotations__) | set(models.JobFields.__annotations__)
    assert sent == set(api.JobIn.model_fields)
    assert set(models.JobChanges.__annotations__) == set(api.JobPatch.model_fields)
    assert set(models.Reschedule.__annotations__) == set(api.RescheduleRequest.model_fields)
    assert set(models.BulkFilter.__annotations__) == set(api.BulkFilterIn.model_fields)
    bulk_params = set(models.BulkParams.__annotations__) | set(models.Reschedule.__annotations__)
    assert bulk_params | {"action", "filter", "dry_run"} == set(api.BulkIn.model_fields)
    schedule = set(models.ScheduleFields.__annotations__) | {"name", "cron", "job"}
    assert schedule == set(schedules.ScheduleIn.model_fields)
    assert set(models.ScheduleChanges.__annotations__) == set(schedules.SchedulePatch.model_fields)


def _answer(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers)


def test_retry_after_reads_seconds_and_dates() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert calls.retry_after(_answer(503, **{"retry-after": "7"})) == 7
    later = (now + timedelta(seconds=30)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert calls.retry_after(_answer(503, **{"retry-after": later}), now) == 30
    assert calls.retry_after(_answer(503, **{"retry-after": "soon"})) is None
    superscript = httpx.Response(503, headers=[(b"retry-after", "²".encode("latin-1"))])
    assert calls.retry_after(superscript) is None
    assert calls.retry_after(_answer(503)) is None


def test_what_is_sent_again() -> None:
    backoff = Backoff(first=1, multiplier=2, cap=4)
    cancel = Call("POST", "/v1/jobs/1/cancel")
    read = Call("GET", "/v1/jobs/1", idempotent=True)
    refused = httpx.ConnectError("refused")
    lost = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    # Never sent, or refused by a 503 (nothing stored): any call goes again.
    assert calls.retry_delay(cancel, refused, 0, backoff) is not None
    assert calls.retry_delay(cancel, _answer(503, **{"retry-after": "3"}), 0, backoff) == 3
    # Sent but unanswered: only what is safe twice.
    assert calls.retry_delay(cancel, lost, 0, backoff) is None
    assert calls.retry_delay(read, lost, 0, backoff) is not None
    # Answers other than 503 are final.
    for status in (200, 404, 409, 422, 500, 502):
        assert calls.retry_delay(read, _answer(status), 0, backoff) is None
    # The delay grows to the cap, jittered in its upper half.
    for attempt, ceiling in ((0, 1), (1, 2), (2, 4), (5, 4)):
        delay = calls.retry_delay(read, refused, attempt, backoff)
        assert delay is not None and ceiling / 2 <= delay <= ceiling


def test_keyed_creates_keep_their_key_and_are_idempotent() -> None:
    one = calls.add_job({"type": "ok", "queue": None}, None)
    assert one.idempotent and one.body == {"type": "ok"}
    assert one.headers["Idempotency-Key"].startswith("hipq-client-")
    assert (
        calls.add_job({"type": "ok"}, None).headers["Idempotency-Key"]
        != one.headers["Idempotency-Key"]
    )
    assert calls.add_jobs([{"type": "ok"}], "mine").headers["Idempotency-Key"] == "mine"
    assert not calls.cancel_job(1).idempotent and not calls.match_response(1, 2, False).idempotent


def test_label_filters_are_name_colon_value() -> None:
    call = calls.list_jobs(
        queue=None,
        states=["failed"],
        type=None,
        labels={"region": "east", "url": "a:b"},
        limit=5,
        cursor="9",
    )
    assert call.params == [
        ("limit", 5),
        ("state", "failed"),
        ("label", "region:east"),
        ("label", "url:a:b"),
        ("cursor", "9"),
    ]


def test_the_server_offers_wait_when_its_schema_says_so() -> None:
    def schema(*names: str) -> dict[str, object]:
        params = [{"name": n, "in": "query"} for n in names]
        return {"paths": {"/v1/jobs/{job_id}": {"get": {"parameters": params}}}}

    assert calls.offers_wait(schema("job_id", "wait"))
    assert not calls.offers_wait(schema("job_id"))
    assert not calls.offers_wait({"paths": {}})
    assert not calls.offers_wait(None)


def test_wait_polls_with_growing_pauses_or_asks_the_server_to_hold() -> None:
    polling = Waiter(timeout=10, started=0, long_poll=False, read_timeout=30)
    assert polling.next_call(7, 0).params == []
    pauses = []
    for i in range(12):
        pause = polling.pause(i / 2, i / 2)
        assert pause is not None
        pauses.append(pause)
    assert pauses == sorted(pauses) and pauses[0] == 0.05 and pauses[-1] == 2.0
    assert polling.pause(9.5, 9.5) == 0.5  # never past the timeout
    assert polling.pause(10.0, 10.0) is None

    holding = Waiter(timeout=100, started=0, long_poll=True, read_timeout=30)
    call = holding.next_call(7, 0)
    assert call.params == [("wait", "30s")] and call.read_timeout == 60
    assert holding.pause(30, 0) == 0  # the server held it: ask again at once
    assert holding.next_call(7, 95).params == [("wait", "5s")]
    assert holding.pause(95.1, 95) == 0.05  # it answered early: an older server, poll


def test_the_async_client_has_every_method_of_the_sync_one() -> None:
    import inspect

    from hipq.client import AsyncClient, Client

    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_") and name not in ("close", "aclose")
        }

    sync, aio = public(Client), public(AsyncClient)
    assert sorted(sync) == sorted(aio)
    for name, signature in sync.items():
        assert list(signature.parameters) == list(aio[name].parameters), name
        if name.startswith("iter_"):
            assert inspect.isasyncgenfunction(getattr(AsyncClient, name)), name
        else:
            assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name


def test_a_value_json_cannot_carry_is_refused_before_sending_naming_its_field() -> None:
    # Port 9 (discard) is not listening: a request that went out would fail to connect.
    with Client("http://127.0.0.1:9") as client:
        with pytest.raises(NotJson, match=r"^payload\.x: nan is not a JSON number"):
            client.add_job("ok", {"x": float("nan")})
        with pytest.raises(NotJson) as caught:
            client.add_jobs([{"type": "ok"}, {"type": "ok", "payload": {"y": [1, float("inf")]}}])
    assert caught.value.field == "jobs[1].payload.y[1]"
    assert isinstance(caught.value, ValueError)  # what code catching httpx's error expects
