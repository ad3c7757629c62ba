"""What the client raises: hipq's error answers as exceptions that name the field."""

from __future__ import annotations

from typing import Any

import httpx


class HipqError(Exception):
    """Every error the client raises."""


class NotJson(HipqError, ValueError):
    """A request's body holds a value JSON cannot carry (NaN, an infinity); nothing
    was sent. ``field`` is where it sits (``payload.x``, ``jobs[2].payload.y``)."""

    def __init__(self, field: str, value: float) -> None:
        super().__init__(f"{field}: {value!r} is not a JSON number (NaN and infinities are not)")
        self.field = field


class ConnectionFailed(HipqError):
    """hipq could not be reached (after the retries the call allowed)."""

    def __init__(self, url: str, cause: httpx.TransportError) -> None:
        what = str(cause) or type(cause).__name__
        if isinstance(cause, httpx.ConnectError | httpx.ConnectTimeout):
            super().__init__(f"cannot reach hipq at {url}: {what}")
        else:  # sent, but no answer came: the request may or may not have taken effect
            super().__init__(f"no answer from hipq at {url}: {what}")
        self.url, self.cause = url, cause


class ApiError(HipqError):
    """hipq answered with an error: ``status``, its code, the field at fault, the message.

    ``errors`` holds every ``{"field", "message"}`` of the answer (the first one is
    ``field`` and ``message``)."""

    def __init__(
        self,
        status: int,
        code: str,
        field: str | None,
        message: str,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.field, self.message = status, code, field, message
        self.errors = errors or []

    @classmethod
    def of(cls, response: httpx.Response) -> ApiError:
        """The exception for an error answer, hipq's JSON shape or anything else."""
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("message"), str):
            body = {"error": "http_error", "field": None, "message": f"HTTP {response.status_code}"}
        errors = body.get("errors")
        kind = _BY_STATUS.get(response.status_code)
        if kind is None:
            kind = ServerError if response.status_code >= 500 else ApiError
        return kind(
            response.status_code,
            str(body.get("error") or "http_error"),
            body.get("field") if isinstance(body.get("field"), str) else None,
            body["message"],
            errors if isinstance(errors, list) else None,
        )


class InvalidRequest(ApiError):
    """422 (or 400): the request broke a rule; ``field`` names what."""


class Unauthorized(ApiError):
    """401 (no valid token) or 403 (the token lacks the scope or the queue)."""


class NotFound(ApiError):
    """404: no such job, queue or response."""


class Conflict(ApiError):
    """409: the object's state does not allow it (e.g. cancelling a completed job)."""


class ServerError(ApiError):
    """5xx: hipq (or a proxy before it) failed; 503s are only raised once retries ran out."""


class WaitTimeout(HipqError, TimeoutError):
    """``wait()`` ended before the job reached a terminal state; ``job`` as last seen."""

    def __init__(self, job: Any, timeout: float) -> None:
        super().__init__(f"job {job.id} is still {job.state} after {timeout:g}s")
        self.job, self.timeout = job, timeout


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    409: Conflict,
    422: InvalidRequest,
}
