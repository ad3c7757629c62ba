"""The API fixtures of tests/api, for the operator's verbs."""

from tests.api.conftest import api, sqlite_api, sqlite_url  # noqa: F401
