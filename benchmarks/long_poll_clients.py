"""The clients of ``bench_long_polls.py``, in a process of their own (as a user's are).

Reads rounds from stdin, one JSON line each: ``{"port": P, "paths": [...]}``. Per round
it opens one connection per path to 127.0.0.1:P, then sends every request (HTTP/1.1,
one GET each) and reads every answer, and prints one JSON line: per request the
moment it was sent and the moment its whole answer was read (``time.perf_counter``,
the system's monotonic clock, which the benchmark's server process reads too), and
the answer's ``state``. Raw asyncio streams: the client's own cost per answer is as
small as Python allows, since it shares the machine's cores with the server.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time


async def _answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return await reader.readexactly(length)


async def _round(port: int, paths: list[str]) -> dict[str, list[object]]:
    streams = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port) for _ in paths))
    sent: list[float] = []
    got: list[float] = [0.0] * len(paths)
    bodies: list[bytes] = [b""] * len(paths)

    async def read(i: int, reader: asyncio.StreamReader) -> None:
        bodies[i] = await _answer(reader)
        got[i] = time.perf_counter()

    readers = []
    for i, ((reader, writer), path) in enumerate(zip(streams, paths, strict=True)):
        writer.write(f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode())
        sent.append(time.perf_counter())
        readers.append(asyncio.create_task(read(i, reader)))
    await asyncio.gather(*readers)
    for _, writer in streams:
        writer.close()
    states = [json.loads(b).get("state") if b else None for b in bodies]
    return {"sent": sent, "got": got, "states": states}


async def main() -> None:
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        order = json.loads(line)
        print(json.dumps(await _round(order["port"], order["paths"])), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
