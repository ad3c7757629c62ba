"""Schedules tests reuse the API fixtures (a started Service on a FakeClock, no loops)."""

from tests.api.conftest import api, sqlite_api, sqlite_url  # noqa: F401
