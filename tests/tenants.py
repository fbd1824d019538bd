"""Fixtures' pieces for isolation tests: two tenants in one process, and a
web server on 127.0.0.1 that counts the requests reaching it."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import durable_obj
from durable_obj.core.object import DurableObject


@contextlib.contextmanager
def two_tenants(
    root: Path, secret: str, column: str = "s"
) -> Iterator[tuple[DurableObject, DurableObject]]:
    """Objects A and B open in one process on folders under `root`: B holds
    `secret` in table `secret`, A a row 'mine' in table `t(<column>)`."""
    with (
        durable_obj.open(str(root / "a"), owner="a") as a,
        durable_obj.open(str(root / "b"), owner="b") as b,
    ):
        b.execute("CREATE TABLE secret (s String) ENGINE = MergeTree ORDER BY s")
        b.execute(f"INSERT INTO secret VALUES ('{secret}')")
        b.flush()
        a.execute(f"CREATE TABLE t ({column} String) ENGINE = MergeTree ORDER BY {column}")
        a.execute("INSERT INTO t VALUES ('mine')")
        a.flush()
        yield a, b


class Web(http.server.ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 that answers every GET with `body` and
    counts the requests."""

    hits = 0
    body = b"from-the-network\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # the name http.server calls
        assert isinstance(self.server, Web)
        self.server.hits += 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def web(body: bytes = Web.body) -> Iterator[Web]:
    """A `Web` serving on a free port until the block ends."""
    server = Web(("127.0.0.1", 0), _Handler)
    server.body = body
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
