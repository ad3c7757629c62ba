"""Which errors are the database's faults (503, /readyz not ready) and which are not."""

from __future__ import annotations

import socket
import sqlite3

import pytest
from sqlalchemy import exc as sa_exc

from hipq.faults import unavailable


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(111, "Connect call failed"),
        ConnectionResetError(104, "Connection reset by peer"),
        OSError(101, "Network is unreachable"),
        OSError("Multiple exceptions: [Errno 111] Connect call failed"),
        socket.gaierror(-2, "Name or service not known"),
        TimeoutError(),
        sqlite3.OperationalError("database is locked"),
    ],
)
def test_a_connection_that_fails_is_a_database_fault(error: BaseException) -> None:
    assert unavailable(error) is not None


@pytest.mark.parametrize(
    "error",
    [
        IsADirectoryError(21, "Is a directory"),  # ZoneInfo("Europe")
        FileNotFoundError(2, "No such file or directory"),
        PermissionError(13, "Permission denied"),
        sqlite3.IntegrityError("UNIQUE constraint failed"),
    ],
)
def test_other_errors_are_not_the_database_s(error: BaseException) -> None:
    assert unavailable(error) is None
    try:  # nor when the chain of a wrapped error holds them
        raise RuntimeError("while handling a request") from error
    except RuntimeError as wrapped:
        assert unavailable(wrapped) is None
    assert unavailable(sa_exc.StatementError("x", None, None, error)) is None
