#!/usr/bin/env python3
"""Benchmarks of hipq's core; the same as ``hipq bench`` (see benchmarks/README.md).

python benchmarks/bench_core.py                       # all four, SQLite and PostgreSQL
python benchmarks/bench_core.py enqueue latency --engine sqlite
python benchmarks/bench_core.py process --backlog 5000 --engine postgres
python benchmarks/bench_core.py --help                # every size flag
"""

from __future__ import annotations

import sys

from common import run_cli

if __name__ == "__main__":
    run_cli("bench", sys.argv[1:], "bench_core.py")
