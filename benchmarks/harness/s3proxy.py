"""A tiny reverse proxy on 127.0.0.1 that adds latency to every S3 request.

    proxy = LatencyProxy("http://127.0.0.1:8333", latency=0.020)
    proxy.start()                   # proxy.endpoint -> "http://127.0.0.1:<port>"
    ...
    proxy.stop()

Both implementations are pointed at `proxy.endpoint`, so each request of
either one waits the same `latency` seconds before it is forwarded: the one
fair way to model a distant object store for two clients built on different
S3 libraries (s3fs/aiobotocore and boto3). The Host header is forwarded
unchanged, so SigV4 signatures made for the proxy's address still verify.

Bodies are forwarded byte for byte; a chunked request body is re-sent
chunked (S3 streaming uploads sign their own chunk framing inside it).

Every forwarded request is logged in `proxy.requests` (method, path with
query, status, bytes of the answer's body): a test counts there what a
store sent (tests/stores/test_conditional_get.py, at latency 0).
"""

from __future__ import annotations

import http.client
import http.server
import threading
import time
import urllib.parse
from typing import NamedTuple

#: Hop-by-hop headers a proxy must not forward (RFC 9110 section 7.6.1).
_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"}


class Seen(NamedTuple):
    """One request the proxy forwarded, and the answer it passed back."""

    method: str
    path: str
    status: int
    body_bytes: int


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    #: The answer goes out as two writes (head, then body): with Nagle's
    #: algorithm on, the body waits for the client's delayed ACK of the
    #: head, about 40 ms more than `latency` per request (measured: 65 ms a
    #: GET at latency 20 ms, 23 ms with TCP_NODELAY).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _body(self) -> tuple[bytes, bool]:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(parts), True
        return self.rfile.read(int(self.headers.get("Content-Length") or 0)), False

    def _forward(self) -> None:
        body, chunked = self._body()
        time.sleep(self.server.latency)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        conn = self.server.upstream()
        try:
            if chunked:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for key, value in headers.items():
                    conn.putheader(key, value)
                conn.endheaders()
                if body:
                    conn.send(b"%x\r\n%s\r\n" % (len(body), body))
                conn.send(b"0\r\n\r\n")
            else:
                conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            self.server.discard()
            raise
        with self.server.lock:
            self.server.requests.append(Seen(self.command, self.path, resp.status, len(data)))
        self.send_response_only(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in _HOP and key.lower() not in (
                "transfer-encoding",
                "content-length",
            ):
                self.send_header(key, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        elif resp.getheader("Content-Length") is not None:
            self.send_header("Content-Length", str(resp.getheader("Content-Length")))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    #: The default backlog of 5 drops the SYNs of a burst of parallel fetches,
    #: and each dropped one costs the client a 1 s TCP retransmit.
    request_queue_size = 256

    def __init__(self, target: str, latency: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        parsed = urllib.parse.urlsplit(target)
        self.target = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.latency = latency
        self._local = threading.local()
        self.lock = threading.Lock()
        self.requests: list[Seen] = []
        self.upstreams: list[http.client.HTTPConnection] = []

    def upstream(self) -> http.client.HTTPConnection:
        """One kept-alive upstream connection per handler thread."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(*self.target, timeout=300)
            self._local.conn = conn
            with self.lock:
                self.upstreams.append(conn)
        return conn

    def discard(self) -> None:
        self._local.conn = None


class LatencyProxy:
    """Forward to `target` (an http:// endpoint), sleeping `latency` s per request."""

    def __init__(self, target: str, latency: float) -> None:
        self._server = _Server(target, latency)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[Seen]:
        """Every request forwarded so far (clear it to count from now on)."""
        return self._server.requests

    def start(self) -> LatencyProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._server.lock:
            for conn in self._server.upstreams:
                conn.close()  # a handler still running reconnects on its own
