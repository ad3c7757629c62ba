"""Schedules tests reuse the API fixtures (a started Service on a FakeClock, no loops)
and the e2e ones (`hipq serve` subprocesses)."""

from tests.api.conftest import api, sqlite_api, sqlite_url  # noqa: F401
from tests.e2e.conftest import servers  # noqa: F401
