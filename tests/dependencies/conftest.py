"""Fixtures of the dependency tests: the API fixtures on both engines."""

from tests.api.conftest import api, sqlite_url  # noqa: F401
