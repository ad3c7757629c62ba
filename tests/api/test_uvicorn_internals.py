"""What ``hipq.api.one_send`` and ``hipq.api.slow_clients`` rely on in uvicorn.

Both subclass uvicorn's httptools protocol and reach into its response cycle; none
of that is uvicorn's public API. pyproject.toml bounds uvicorn to the versions this
was checked with; a uvicorn whose internals differ fails here rather than in
production (a response whose head never leaves, or a timer never armed).
"""

from __future__ import annotations

import inspect
import tomllib
from pathlib import Path

import uvicorn
from packaging.requirements import Requirement
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from hipq.api.one_send import OneSendProtocol
from hipq.api.slow_clients import header_timeout_protocol

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _uvicorn_requirement() -> Requirement:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    [found] = [Requirement(d) for d in deps if Requirement(d).name == "uvicorn"]
    return found


def test_pyproject_bounds_uvicorn_to_the_installed_checked_version() -> None:
    spec = _uvicorn_requirement().specifier
    assert any(s.operator == "<" for s in spec), "uvicorn needs an upper bound"
    assert spec.contains(uvicorn.__version__), (uvicorn.__version__, str(spec))


def _params(func: object) -> list[str]:
    return list(inspect.signature(func).parameters)  # type: ignore[arg-type]


def test_the_protocol_methods_overridden_keep_their_signatures() -> None:
    expected = {
        "on_headers_complete": ["self"],
        "on_message_begin": ["self"],
        "shutdown": ["self"],
        "connection_made": ["self", "transport"],
        "connection_lost": ["self", "exc"],
    }
    for name, params in expected.items():
        assert _params(getattr(HttpToolsProtocol, name)) == params, name
    # Called by uvicorn with the config, server state and loop: passed through as given.
    first = _params(HttpToolsProtocol.__init__)[:4]
    assert first == ["self", "config", "server_state", "app_state"]


def test_the_attributes_used_are_set_where_expected() -> None:
    init = inspect.getsource(HttpToolsProtocol.__init__)
    assert "self.loop =" in init
    assert "self.cycle" in init  # None until the first request
    assert "self.transport = transport" in inspect.getsource(HttpToolsProtocol.connection_made)
    # A new request's cycle is made in on_headers_complete, which one_send wraps.
    assert "self.cycle = RequestResponseCycle(" in inspect.getsource(
        HttpToolsProtocol.on_headers_complete
    )
    cycle_init = inspect.getsource(RequestResponseCycle.__init__)
    assert "self.transport = transport" in cycle_init
    assert "self.response_started = False" in cycle_init
    send = inspect.getsource(RequestResponseCycle.send)
    # The head and the body leave through the cycle's transport, the head first.
    assert "self.response_started = True" in send
    assert send.count("self.transport.write(") >= 2


def test_the_subclasses_are_uvicorn_protocols() -> None:
    protocol = header_timeout_protocol(2.5)
    assert issubclass(protocol, OneSendProtocol)
    assert issubclass(protocol, HttpToolsProtocol)
    assert protocol.header_timeout == 2.5  # type: ignore[attr-defined]
