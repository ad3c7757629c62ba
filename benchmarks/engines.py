"""The database options every benchmark script takes."""

from __future__ import annotations

import argparse

from hipq.commands.bench import BenchOptions


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--postgres-url", default=BenchOptions.postgres_url)


def chosen_engines(args: argparse.Namespace) -> tuple[list[str], BenchOptions]:
    """The engines to run on, in order, and the options that reach them."""
    engines = ["sqlite", "postgres"] if args.engine == "both" else [args.engine]
    return engines, BenchOptions(postgres_url=args.postgres_url)
