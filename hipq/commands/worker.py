"""``hipq worker``: run the jobs of pull types with a python handler, fetched from
hipq's API (``hipq.pull.worker``), until SIGTERM or SIGINT.

The first signal stops fetching and lets the jobs under way finish and report, for
up to ``--grace`` seconds; a second signal (or the grace's end) stops at once: those
jobs time out and are retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from hipq.commands.options import ConfigOpt, UrlOpt, base_url, fail

if TYPE_CHECKING:
    from hipq.transports.python import Handler


def worker(
    types: Annotated[str, typer.Option("--types", metavar="A,B", help="the pull job types to run")],
    handler: Annotated[
        str,
        typer.Option(
            "--handler",
            metavar="MODULE:FUNCTION",
            help="the async handler, with the signature of a python job type's",
        ),
    ],
    concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            max=1000,
            help="the weight of the jobs run at once (a job of weight 2 counts twice; one "
            "heavier than this is left for another worker)",
        ),
    ] = 10,
    wait: Annotated[
        float, typer.Option(min=0, max=60, help="seconds each fetch waits for a job")
    ] = 30.0,
    name: Annotated[
        str | None, typer.Option(help="this worker's name in the jobs it takes")
    ] = None,
    grace: Annotated[
        float, typer.Option(min=0, help="seconds the jobs under way get after SIGTERM")
    ] = 30.0,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Fetch jobs of pull job types from hipq and run them with HANDLER (HIPQ_TOKEN: a
    token with the workers scope)."""
    from hipq.transports.python import HandlerImportError, import_handler

    names = [t.strip() for t in types.split(",") if t.strip()]
    if not names:
        fail("--types names no job type")
    _import_from_the_current_directory()
    try:
        function = import_handler(handler)
    except HandlerImportError as exc:
        fail(f"--handler: {exc}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # httpx logs every request's full URL at INFO: one line per fetch and report.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(_run(base_url(url, config), names, function, concurrency, wait, name, grace))


def _import_from_the_current_directory() -> None:
    """``--handler myapp.images:thumbnail`` finds ``myapp/`` in the directory the worker
    starts in, as Celery's, rq's and arq's workers do: a console script's sys.path
    starts with its own bin directory, not the current one."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)


async def _run(
    url: str,
    types: list[str],
    handler: Handler,
    concurrency: int,
    wait: float,
    name: str | None,
    grace: float,
) -> None:
    from hipq.client import AsyncClient, HipqError
    from hipq.pull.worker import Worker, WorkerStopped

    log = logging.getLogger("hipq.worker")
    async with AsyncClient(url) as client:
        worker = Worker(
            client,
            types,
            handler,
            concurrency=concurrency,
            wait=wait,
            name=name,
        )
        signals = 0
        hurry = asyncio.Event()

        def on_signal(sig: int) -> None:
            nonlocal signals
            signals += 1
            if signals == 1:
                log.warning(
                    "%s: fetching no more; %d jobs under way get up to %gs",
                    signal.Signals(sig).name,
                    worker.running,
                    grace,
                )
                worker.stop()
                asyncio.get_running_loop().call_later(grace, hurry.set)
            else:
                hurry.set()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal, sig)
        log.info("worker for %s at %s: %d at once", ",".join(types), url, concurrency)
        running = asyncio.ensure_future(worker.run())
        hurried = asyncio.ensure_future(hurry.wait())
        try:
            await asyncio.wait([running, hurried], return_when=asyncio.FIRST_COMPLETED)
            if not running.done():
                log.warning("stopping at once: %d jobs cut off (they are retried)", worker.running)
                await worker.stop_now()
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
            else:
                running.result()
        except WorkerStopped as exc:
            fail(str(exc))
        except HipqError as exc:
            fail(str(exc))
        finally:
            hurried.cancel()
        log.info("worker stopped after %d jobs", worker.done)
