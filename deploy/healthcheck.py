"""The image's HEALTHCHECK: exit 0 when the local `hipq serve` answers /readyz with 200.

Standard library only, and run with `python -I -S`: a check every 10 s must cost a few
milliseconds of CPU, not the second it takes to import hipq's CLI. The port is
HIPQ_SERVER__PORT when set, else 8000 (the image's config); a mounted config with
another port sets HIPQ_SERVER__PORT too.
"""

import os
import socket
import sys


def main() -> int:
    port = int(os.environ.get("HIPQ_SERVER__PORT") or "8000")
    url = f"http://127.0.0.1:{port}/readyz"
    # Plain HTTP/1.0 on a socket: urllib's imports alone cost more CPU than the check.
    # "localhost" is in every Host allow-list, whatever server.allowed_hosts says.
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")
            status_line = conn.makefile("rb").readline(200).decode("latin-1")
    except OSError as exc:
        print(f"not ready: {url}: {exc}", file=sys.stderr)
        return 1
    parts = status_line.split()
    status = parts[1] if len(parts) > 1 else repr(status_line)
    if status != "200":
        print(f"not ready: {url} answered {status}", file=sys.stderr)
        return 1
    print("ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
