"""What checking a bearer token costs each request: the route lookup and the
constant-time comparison with every configured token, measured in-process.

    python benchmarks/bench_auth.py [--tokens 1 10 100]

Prints microseconds per request for the lookup of the route's scope and for
``Tokens.check`` (which compares every configured digest, whichever matches).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import timeit
from pathlib import Path

from hipq.api import auth
from hipq.app import create_app
from hipq.config import load_settings
from hipq.security.tokens import ENV_VAR, config_line, load_tokens, new_token
from hipq.service import Service


def check_cost(count: int, n: int = 20_000) -> float:
    secrets = [new_token() for _ in range(count)]
    lines = ";".join(config_line(f"t{i}", ["read"], s) for i, s in enumerate(secrets))
    tokens = load_tokens(None, {ENV_VAR: lines})
    best = min(timeit.repeat(lambda: tokens.check(secrets[-1]), number=n, repeat=5))
    return best / n * 1e6


async def lookup_cost(n: int = 20_000) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            None, database_url=f"sqlite+aiosqlite:///{Path(tmp) / 'hipq.db'}", migrate_on_start=True
        )
        app = create_app(Service(settings), manage_service=False)
        middleware = auth.Authentication(app, app, load_tokens(None, {}), settings)
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/responses/17/match",
            "root_path": "",
            "query_string": b"",
            "headers": [],
        }
        best = min(timeit.repeat(lambda: middleware._requirement(scope), number=n, repeat=5))
        return best / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 10, 100])
    args = parser.parse_args()
    print(f"route lookup (the last route of /v1): {asyncio.run(lookup_cost()):.1f} µs/request")
    for count in args.tokens:
        print(f"Tokens.check with {count:>3} tokens: {check_cost(count):.1f} µs/request")


if __name__ == "__main__":
    main()
