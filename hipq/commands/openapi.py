"""`hipq openapi`: print the OpenAPI schema hipq serves, as committed in openapi.json.

The schema is the API's contract: regenerate the committed file after changing a route,
a model or a declared error (`hipq openapi > openapi.json`), and review the difference.
"""

from __future__ import annotations

from typing import Any

import typer

from hipq.commands.options import command_group

app = command_group(help="Print the OpenAPI schema (the API's contract) as JSON.")


def contract_schema() -> dict[str, Any]:
    """The schema of an app on default settings, built without opening a database
    (the configuration's queues and job types do not change it)."""
    from hipq.app import create_app
    from hipq.config import Settings
    from hipq.security.tokens import Tokens
    from hipq.service import Service

    # /metrics is declared as it is by default: behind the read scope.
    settings = Settings(database_url="sqlite+aiosqlite:///:memory:", auth={"metrics_open": False})
    return create_app(Service(settings), manage_service=False, tokens=Tokens()).openapi()


@app.callback(invoke_without_command=True)
def openapi() -> None:
    """Print the schema (sorted keys, two-space indent), e.g. `hipq openapi > openapi.json`."""
    from hipq.api.contract import schema_text

    typer.echo(schema_text(contract_schema()), nl=False)
