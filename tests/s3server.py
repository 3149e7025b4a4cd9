"""A real S3-compatible server on 127.0.0.1 for the tests, and a proxy that injects faults.

``MotoServer`` runs moto's S3 in a child process. The parent binds the listening
socket and hands it to the child, so no other program can take the port between
choosing it and serving on it, and readiness is one request that is answered as
soon as the child serves (or fails at once if the child dies): no sleeping, no
polling against a clock. moto checks ``If-Match`` and ``If-None-Match`` and then
writes, in two steps; the child serializes every write (PUT, POST, DELETE) so a
conditional write is atomic, as it is on S3, and racing writers see exactly one
winner.

``FaultProxy`` stands between a client and the server: it forwards each request
unchanged (the Host header too, so a client signs for the proxy's address; moto
does not check signatures), counts and records it, and can be told to answer
with an error or to close the connection instead of forwarding.

Run as a script (``python s3server.py serve FD``) it is the server's child process.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"
REGION = "us-east-1"

# the last resort only: a server that neither answers nor dies within it is broken
START_DEADLINE_S = 120.0
STOP_DEADLINE_S = 30.0
# A client's limit on one request. obstore's default (30 s) ends a request a busy
# machine is merely slow to answer, and retries it: the server or proxy then counts
# one request more than the test made, and a fault meant for a later one lands on
# it. Tests count requests, so a slow answer must stay one request: this is only a
# last resort against a hung one.
REQUEST_TIMEOUT = "300s"


def _credentials_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        AWS_ACCESS_KEY_ID=ACCESS_KEY_ID,
        AWS_SECRET_ACCESS_KEY=SECRET_ACCESS_KEY,
        AWS_DEFAULT_REGION=REGION,
    )
    env.pop("AWS_SESSION_TOKEN", None)
    env.pop("AWS_PROFILE", None)
    return env


class MotoServer:
    """moto's S3 in a child process on a free port of 127.0.0.1.

    ``start()`` returns once the server answers requests; ``endpoint`` is then
    ``http://127.0.0.1:PORT``. ``stop()`` ends the child and waits for it.
    Usable as a context manager.
    """

    def __init__(self) -> None:
        self.port: int | None = None
        self.endpoint: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def start(self) -> MotoServer:
        if self.process is not None:
            raise RuntimeError("the server is already started")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            self.port = listener.getsockname()[1]
            env = _credentials_env()
            env["MOTO_PORT"] = str(self.port)
            self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
            self.process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "serve", str(listener.fileno())],
                pass_fds=(listener.fileno(),),
                env=env,
                # the child ends when this pipe does: when stop() closes it, or when
                # this process dies without stopping it
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
            )
        finally:
            # The child holds its own copy; once it dies the socket closes, and a
            # request waiting on it fails instead of hanging.
            listener.close()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        """One request, sent at once: the kernel queues it on the listening socket,
        and the child answers it as soon as it serves."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=START_DEADLINE_S)
        try:
            connection.request("GET", "/moto-api/")
            connection.getresponse().read()
        except (OSError, http.client.HTTPException) as error:
            raise RuntimeError(
                f"the moto server did not start ({error!r}); its output:\n{self.output()}"
            ) from error
        finally:
            connection.close()

    def output(self) -> str:
        """What the child printed so far (its errors, mostly)."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.stdin is not None:
            process.stdin.close()
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client for ``endpoint`` with the fake credentials (one per endpoint)."""
    with _clients_lock:
        client = _clients.get(endpoint)
        if client is None:
            import boto3

            client = boto3.session.Session(
                aws_access_key_id=ACCESS_KEY_ID,
                aws_secret_access_key=SECRET_ACCESS_KEY,
                region_name=REGION,
            ).client("s3", endpoint_url=endpoint)
            _clients[endpoint] = client
        return client


def create_bucket(endpoint: str, name: str) -> None:
    """Create the bucket ``name`` on the server at ``endpoint``."""
    s3_client(endpoint).create_bucket(Bucket=name)


def s3_store(endpoint: str, bucket: str, **options: Any) -> Any:
    """An ``obstore`` S3Store on ``bucket`` at ``endpoint`` (path-style, plain HTTP).

    ``options`` are passed on to ``S3Store`` (``retry_config``, ``client_options``...);
    ``client_options`` are added to ``allow_http`` and ``REQUEST_TIMEOUT``.
    """
    from obstore.store import S3Store

    client_options: Any = {
        "allow_http": True,
        "timeout": REQUEST_TIMEOUT,
        **options.pop("client_options", {}),
    }
    return S3Store(
        bucket,
        endpoint=endpoint,
        access_key_id=ACCESS_KEY_ID,
        secret_access_key=SECRET_ACCESS_KEY,
        region=REGION,
        virtual_hosted_style_request=False,
        client_options=client_options,
        **options,
    )


# --- the fault-injecting proxy ---------------------------------------------------------

OPERATIONS = ("GET", "PUT", "HEAD", "DELETE", "POST", "LIST")

# headers that belong to one hop (RFC 9110, 7.6.1), never forwarded as they are; a
# request's Expect is answered by the proxy itself
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
    }
)
# the query parameters of ListObjects (v1 and v2)
_LIST_PARAMETERS = frozenset(
    {
        "list-type",
        "prefix",
        "delimiter",
        "marker",
        "start-after",
        "continuation-token",
        "max-keys",
        "encoding-type",
        "fetch-owner",
    }
)
_ERROR_CODES = {
    400: "BadRequest",
    403: "AccessDenied",
    404: "NoSuchKey",
    409: "OperationAborted",
    412: "PreconditionFailed",
    429: "SlowDown",
    500: "InternalError",
    502: "BadGateway",
    503: "SlowDown",
    504: "GatewayTimeout",
}


class ProxiedRequest(NamedTuple):
    """One request the proxy received.

    ``method`` is the operation it was counted as (see ``operation``). ``status``
    is what the client was answered, ``None`` if the connection was closed
    instead. ``fault`` tells whether the proxy failed or dropped it on purpose.
    ``headers`` are the request's, names in lower case.
    """

    method: str
    path: str
    query: str
    status: int | None
    fault: bool = False
    headers: dict[str, str] = {}

    def __repr__(self) -> str:  # without the headers, which are long
        return (
            f"ProxiedRequest({self.method} {self.path}?{self.query} -> {self.status}"
            f"{' (fault)' if self.fault else ''})"
        )


def operation(method: str, path: str, query: str) -> str:
    """What a request is counted as: its method; but ``LIST`` for a GET that lists a
    bucket (``list-type=2``, or a GET on the bucket's root whose query parameters
    are all ListObjects ones, such as ``prefix``), and ``DELETE`` for a
    DeleteObjects (``POST /bucket?delete``), which is how obstore deletes."""
    parameters = parse_qs(query, keep_blank_values=True)
    if method == "POST" and "delete" in parameters:
        return "DELETE"  # DeleteObjects, which obstore's delete() sends even for one key
    if method != "GET":
        return method
    if "list-type" in parameters:
        return "LIST"
    at_bucket_root = "/" not in path.strip("/") and path.strip("/") != ""
    if at_bucket_root and set(parameters) <= _LIST_PARAMETERS:
        return "LIST"
    return "GET"


class _Fault:
    def __init__(self, kind: str, count: int, status: int, method: str | None) -> None:
        self.kind = kind  # "fail", "drop" or "drop-answer"
        self.remaining = count
        self.status = status
        self.method = method


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` that can fail requests.

    It serves from the moment it is made, on ``endpoint``, until ``stop()``.
    Faults are used up in the order they were set; ``method`` restricts one to an
    operation (``"PUT"``, ``"LIST"``..., see ``operation``). A request failed or
    dropped on purpose is counted and recorded like any other; only those of
    ``drop_answer_next`` reach the server.
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"an http://HOST:PORT upstream is needed, not {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._every: tuple[int, int, str | None] | None = None  # (k, status, method)
        self._every_seen = 0
        self._refused: int | None = None
        self._gather = threading.Condition()
        self._gathering: tuple[int, str] | None = None
        self._guard = 120.0
        self._arrived = 0
        self.gathered = False
        self.most_in_flight = 0
        self._counts = dict.fromkeys(OPERATIONS, 0)
        self._requests: list[ProxiedRequest] = []
        self._connections: set[socket.socket] = set()
        self._server = _ProxyServer(("127.0.0.1", 0), _ProxyHandler, self)
        self.port: int = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._stopping = False
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        # a blocking accept, not serve_forever's select loop, which would see a stop
        # only at its next half-second poll
        server = self._server
        while True:
            try:
                request, address = server.get_request()
            except OSError:
                return
            if self._stopping:
                request.close()
                return
            server.process_request(request, address)

    # what tests tell it

    def fail_next(self, n: int = 1, status: int = 503, *, method: str | None = None) -> None:
        """Answer the next ``n`` requests (of operation ``method``, if given) with
        ``status`` and an S3-style XML error, without forwarding them."""
        with self._lock:
            self._faults.append(_Fault("fail", n, status, method))

    def drop_next(self, n: int = 1, *, method: str | None = None) -> None:
        """Close the connection of the next ``n`` requests (of operation ``method``,
        if given) without answering or forwarding them."""
        with self._lock:
            self._faults.append(_Fault("drop", n, 0, method))

    def drop_answer_next(self, n: int = 1, *, method: str | None = None) -> None:
        """Forward the next ``n`` requests (of operation ``method``, if given), then
        close their connection instead of passing the answer on: the server did
        the work, the client never hears of it."""
        with self._lock:
            self._faults.append(_Fault("drop-answer", n, 0, method))

    def fail_every(self, k: int, status: int = 503, *, method: str | None = None) -> None:
        """Answer every ``k``-th request from now on (of operation ``method``, if
        given) with ``status``; ``k = 0`` stops it. Requests that ``fail_next`` or
        ``drop_next`` take count too."""
        if k < 0:
            raise ValueError("k must be 0 or more")
        with self._lock:
            self._every = (k, status, method) if k else None
            self._every_seen = 0

    def refuse_writes(self, status: int = 403) -> None:
        """Answer every write (PUT, POST, DELETE) with ``status`` from now on, as a
        server does for credentials that may only read; ``reset()`` ends it."""
        with self._lock:
            self._refused = status

    def gather_next(self, n: int, *, method: str, guard_seconds: float = 120) -> None:
        """Hold each of the next ``n`` requests of operation ``method`` until all ``n``
        have arrived, then forward them together: only a client with ``n`` requests
        in flight at once gets past. ``gathered`` tells whether they met; if they
        have not after ``guard_seconds`` (a last resort against a hung test, never
        a measure), they go on one by one and ``gathered`` stays false."""
        with self._gather:
            self._gathering = (n, method)
            self._guard = guard_seconds
            self._arrived = 0
            self.gathered = False
            self.most_in_flight = 0

    def _wait_for_the_others(self, op: str) -> None:
        with self._gather:
            if self._gathering is None or self._gathering[1] != op:
                return
            n = self._gathering[0]
            self._arrived += 1
            self.most_in_flight = max(self.most_in_flight, self._arrived)
            if self._arrived >= n:
                self.gathered = True
                self._gathering = None
                self._gather.notify_all()
                return
            if not self._gather.wait_for(lambda: self._gathering is None, self._guard):
                self._gathering = None  # broken: let everyone through, gathered stays false
                self._gather.notify_all()

    def reset(self) -> None:
        """Forget the faults, the counts and the recorded requests."""
        with self._lock:
            self._faults.clear()
            self._refused = None
            self._every = None
            self._every_seen = 0
        self.clear_counts()

    def clear_counts(self) -> None:
        """Forget the counts and the recorded requests, keep the faults."""
        with self._lock:
            self._counts = dict.fromkeys(OPERATIONS, 0)
            self._requests.clear()

    # what tests read

    @property
    def counts(self) -> dict[str, int]:
        """Requests received per operation (GET, PUT, HEAD, DELETE, POST, LIST),
        failed and dropped ones included: a copy."""
        with self._lock:
            return dict(self._counts)

    @property
    def requests(self) -> list[ProxiedRequest]:
        """Every request received, in the order they were answered: a copy."""
        with self._lock:
            return list(self._requests)

    def stop(self) -> None:
        """Stop serving, close every client connection, and wait for the handlers."""
        if self._stopping:
            return
        self._stopping = True
        # wakes the accept, which then sees the stop
        socket.create_connection(("127.0.0.1", self.port)).close()
        self._thread.join()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._server.server_close()  # joins the handler threads

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # used by the handler

    def _decide(self, op: str) -> tuple[str, int] | None:
        """The fault for the next request of operation ``op``, if any: counts it."""
        with self._lock:
            self._counts[op] = self._counts.get(op, 0) + 1
            if self._refused is not None and op in ("PUT", "POST", "DELETE"):
                return "fail", self._refused
            every: int | None = None
            if self._every is not None:
                k, status, method = self._every
                if method is None or method == op:
                    self._every_seen += 1
                    if self._every_seen % k == 0:
                        every = status
            for fault in self._faults:
                if fault.method is None or fault.method == op:
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault.kind, fault.status
            if every is not None:
                return "fail", every
        return None

    def _record(self, request: ProxiedRequest) -> None:
        with self._lock:
            self._requests.append(request)


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins them
    block_on_close = True

    def __init__(self, address: tuple[str, int], handler: type, proxy: FaultProxy) -> None:
        self.proxy = proxy
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # registered before its thread starts, so that stop() sees every connection
        with self.proxy._lock:
            self.proxy._connections.add(request)
        super().process_request(request, client_address)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # an answer is written as headers, then body: with Nagle's algorithm the body
    # would wait for the client's delayed ACK (about 40 ms a request)
    disable_nagle_algorithm = True
    server: _ProxyServer

    def setup(self) -> None:
        super().setup()
        self._upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.proxy._lock:
                self.server.proxy._connections.discard(self.connection)
            if self._upstream is not None:
                self._upstream.close()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        proxy = self.server.proxy
        parts = urlsplit(self.path)
        op = operation(self.command, parts.path, parts.query)
        headers = {name.lower(): value for name, value in self.headers.items()}

        def record(status: int | None, fault: bool) -> None:
            proxy._record(ProxiedRequest(op, parts.path, parts.query, status, fault, headers))

        body = self._read_body()
        fault = proxy._decide(op)
        # recorded before the client hears anything, so that a client that has its
        # answer finds its request in ``requests``
        if fault is not None and fault[0] == "drop":
            record(None, True)
            self._drop()
            return
        if fault is not None and fault[0] == "fail":
            record(fault[1], True)
            self._answer_error(fault[1], parts.path)
            return
        proxy._wait_for_the_others(op)
        try:
            status, reason, answer_headers, payload = self._forward(body)
        except (OSError, http.client.HTTPException):
            # the server went away: the client sees a dropped connection
            record(None, False)
            self._drop()
            return
        if fault is not None and fault[0] == "drop-answer":
            record(None, True)
            self._drop()
            return
        record(status, False)
        self.send_response(status, reason)
        for name, value in answer_headers:
            self.send_header(name, value)
        self.end_headers()
        if payload:
            self.wfile.write(payload)

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        if self._upstream is None:
            self._upstream = http.client.HTTPConnection(*self.server.proxy.upstream)
        upstream = self._upstream
        upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                upstream.putheader(name, value)
        if body or self.command in ("PUT", "POST") or "Content-Length" in self.headers:
            upstream.putheader("Content-Length", str(len(body)))
        upstream.endheaders(body or None)
        response = upstream.getresponse()
        payload = response.read()
        headers = [
            (name, value)
            for name, value in response.getheaders()
            if name.lower() not in _HOP_BY_HOP
            and not (name.lower() == "content-length" and self.command != "HEAD")
        ]
        # a HEAD answer keeps the server's Content-Length (the object's size)
        if self.command != "HEAD" and response.status not in (204, 304):
            headers.append(("Content-Length", str(len(payload))))
        if response.will_close:
            upstream.close()
            self._upstream = None
        return response.status, response.reason, headers, payload

    def _answer_error(self, status: int, path: str) -> None:
        code = _ERROR_CODES.get(status, "InternalError")
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>injected by the test proxy</Message>"
            f"<Resource>{path}</Resource><RequestId>fault-proxy</RequestId></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = do_PATCH = do_OPTIONS = _handle


# --- the server's child process ---------------------------------------------------------


def _serialized_writes(app: Any) -> Any:
    """``app`` with one write (PUT, POST, DELETE) at a time, read to its end while
    holding the lock, so that moto's check of a condition and its write are atomic."""
    lock = threading.Lock()

    def serialized(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") not in ("PUT", "POST", "DELETE"):
            return app(environ, start_response)
        with lock:
            result = app(environ, start_response)
            try:
                return [b"".join(result)]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()

    return serialized


def _serve(fd: int) -> None:
    import logging

    import moto.server
    from werkzeug.serving import WSGIRequestHandler, make_server

    def exit_with_parent() -> None:
        sys.stdin.buffer.read()  # returns when the parent closes the pipe or dies
        os._exit(0)

    threading.Thread(target=exit_with_parent, daemon=True).start()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = moto.server.DomainDispatcherApplication(moto.server.create_backend_app)
    app.debug = True  # type: ignore[attr-defined]
    # newer moto releases (not 5.2.0) keep the spelling of headers with underscores
    handler = getattr(moto.server, "MotoRequestHandler", WSGIRequestHandler)
    server = make_server(
        "127.0.0.1", 0, _serialized_writes(app), threaded=True, request_handler=handler, fd=fd
    )
    server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "serve":
        raise SystemExit("usage: s3server.py serve FD")
    _serve(int(sys.argv[2]))
