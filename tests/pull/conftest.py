"""The pull tests use the API tests' SQLite-only database for input checks."""

from tests.api.conftest import sqlite_url

__all__ = ["sqlite_url"]
