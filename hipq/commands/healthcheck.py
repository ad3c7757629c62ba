"""`hipq healthcheck`: exit 0 when the local `hipq serve` answers /readyz with 200.

For a container's HEALTHCHECK (the slim image has no curl) and for scripts that start
hipq and go on once it is ready (``--wait``): it reads the port from the same config
as the server it checks.
"""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer

from hipq.commands.options import command_group

app = command_group(help="Check that the local hipq serve is ready (exit 0) or not (exit 1).")


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


@app.callback(invoke_without_command=True)
def healthcheck(
    config: Annotated[
        str | None, typer.Option("--config", "-c", envvar="HIPQ_CONFIG", help="YAML config file")
    ] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the answer")] = 5.0,
    wait: Annotated[
        float,
        typer.Option(help="seconds to keep asking until it is ready (0: ask once)"),
    ] = 0.0,
) -> None:
    """GET /readyz on 127.0.0.1 at server.port; exit 1 with one line unless it is 200."""
    # Imported here: `hipq --help` and the other commands need neither.
    from hipq.client.sync import Client
    from hipq.config import ConfigError, load_settings

    try:
        settings = load_settings(config, opens_database=False)
    except ConfigError as exc:
        _fail(str(exc))
    url = f"http://127.0.0.1:{settings.server.port}"
    # "localhost" is in every Host allow-list, whatever server.allowed_hosts says.
    with Client(url, timeout=timeout, headers={"host": "localhost"}) as client:
        if wait > 0:
            if not client.ready().ready:
                typer.echo(f"waiting for hipq at {url} (at most {wait:g} s) ...", err=True)
            try:
                client.wait_ready(wait)
            except TimeoutError as exc:
                _fail(str(exc))
        else:
            ready, status, report = client.ready()
            if status is None:
                _fail(f"not ready: {url}/readyz: {report['problems']['connection']}")
            if not ready:
                _fail(f"not ready: {url}/readyz answered {status}")
    typer.echo("ready")
