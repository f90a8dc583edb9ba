"""A small real HTTP/1.1 server on 127.0.0.1 for fake upstreams: asyncio in a thread of its own.

Subclasses answer `handle(request) -> FakeResponse`. The server records every request, streams chunked
bodies with scripted delays, and notices when a client hangs up before a response is complete (it
watches the socket for EOF while it waits), which is how tests prove that a cancelled stream closed
its upstream request.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class RecordedRequest:
    method: str
    target: str  # path and query, as sent
    headers: dict[str, str]  # names lower-cased
    body: bytes
    connection: int = 0  # which TCP connection it came on (numbered from 1 per server)

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)

    def json(self) -> Any:
        return json.loads(self.body or b"null")

    def form(self) -> dict[str, list[str]]:
        return parse_qs(self.body.decode())


@dataclass
class Chunk:
    data: bytes
    delay: float = 0.0  # seconds to wait before sending it
    # Sent only once the test releases this (a test paces the stream by what its client has received, not
    # by time); given up after STEP_WAIT_S, so a test that never releases cannot hang the fake for ever.
    after: threading.Semaphore | None = None


STEP_WAIT_S = 30.0


@dataclass
class FakeResponse:
    status: int = 200
    body: bytes = b""  # sent with a Content-Length, unless `chunks` is given
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[Chunk] | None = None  # a streamed (chunked) body
    delay: float = 0.0  # before the status line; math.inf waits until the client hangs up
    hang: bool = False  # after the chunks, neither end the body nor close, until the client hangs up
    truncate: bool = False  # after the chunks, close the connection without ending the body
    drop: bool = False  # close the connection without answering at all

    @classmethod
    def json(cls, data: Any, status: int = 200, **kwargs: Any) -> FakeResponse:
        return cls(status, json.dumps(data).encode(), **kwargs)

    @classmethod
    def text(cls, text: str, status: int = 200, content_type: str = "text/plain; charset=utf-8",
             **kwargs: Any) -> FakeResponse:
        return cls(status, text.encode(), content_type, **kwargs)


Handler = Callable[[RecordedRequest], "FakeResponse | Awaitable[FakeResponse]"]

_REASONS = {200: "OK", 301: "Moved Permanently", 302: "Found", 303: "See Other", 307: "Temporary Redirect",
            308: "Permanent Redirect", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


class FakeServer:
    """start() / stop() (or `with`), `base_url`, `requests`, `hangups`; override `handle`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host = host
        self.port = port
        self.requests: list[RecordedRequest] = []
        self.hangups = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self._connection_ids = itertools.count(1)
        self._ready = threading.Event()

    # --- lifecycle (call from the test's thread) ---

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> FakeServer:
        self._thread = threading.Thread(target=self._run, name=f"{type(self).__name__}:{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError(f"{type(self).__name__} did not start listening within 5 s")
        return self

    def stop(self) -> None:
        if self._loop and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(5)

    def reset(self) -> None:
        """Forget the requests and hang-ups, and close connections left over from earlier tests."""
        if self._loop and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._close_connections(), self._loop).result(5)
        self.requests.clear()
        self.hangups = 0

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    async def wait_for_hangups(self, count: int = 1, timeout: float = 5.0) -> None:
        """Poll (from a test's event loop) until `count` clients have hung up mid-response."""
        deadline = time.monotonic() + timeout
        while self.hangups < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{type(self).__name__}: expected {count} client hang-up(s) within "
                                     f"{timeout} s, saw {self.hangups}")
            await asyncio.sleep(0.005)

    def wait_for_hangups_sync(self, count: int = 1, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self.hangups < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{type(self).__name__}: expected {count} client hang-up(s) within "
                                     f"{timeout} s, saw {self.hangups}")
            time.sleep(0.005)

    # --- what subclasses answer ---

    def handle(self, request: RecordedRequest) -> FakeResponse | Awaitable[FakeResponse]:
        return FakeResponse.json({"error": "not found"}, 404)

    def record(self, request: RecordedRequest) -> bool:
        """Whether this request goes into `requests` (control endpoints do not)."""
        return True

    # --- the server thread ---

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._listen())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._on_connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server:
            self._server.close()
        await self._close_connections()

    async def _close_connections(self) -> None:
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer, next(self._connection_ids))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:  # reset() or stop(): drop the connection, unsent bytes and all
            writer.transport.abort()
        finally:
            self._connections.discard(task)
            if not writer.transport.is_closing():
                writer.close()  # sends what is buffered (a truncated body's last chunks), then closes

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: int) -> None:
        while True:
            request = await _read_request(reader)
            if request is None:
                return
            request.connection = connection
            if self.record(request):
                self.requests.append(request)
            response = self.handle(request)
            if inspect.isawaitable(response):
                response = await response
            complete = await self._respond(response, reader, writer)
            if not complete or request.headers.get("connection", "").lower() == "close":
                return

    async def _respond(self, response: FakeResponse, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> bool:
        """Send the response; False when the connection must close (a hang-up, a drop, a truncation)."""
        eof = asyncio.ensure_future(reader.read(1))  # completes with b"" when the client hangs up
        try:
            if response.drop:
                return False
            if response.delay and await self._hung_up(eof, response.delay):
                return False
            writer.write(_head(response))
            if response.chunks is None:
                writer.write(response.body)
                await writer.drain()
                return True
            return await self._send_chunks(response, eof, writer)
        except ConnectionError:
            self.hangups += 1
            return False
        finally:
            # Awaited, not just cancelled: the next request's read must not start while this one still waits.
            eof.cancel()
            await asyncio.gather(eof, return_exceptions=True)

    async def _send_chunks(self, response: FakeResponse, eof: asyncio.Future, writer: asyncio.StreamWriter) -> bool:
        for chunk in response.chunks or []:
            if chunk.delay and await self._hung_up(eof, chunk.delay):
                return False
            if chunk.after is not None and await self._hung_up_before_release(eof, chunk.after):
                return False
            if chunk.data:
                writer.write(f"{len(chunk.data):x}\r\n".encode() + chunk.data + b"\r\n")
                if chunk.delay or chunk.after or writer.transport.get_write_buffer_size() > 65536:
                    await writer.drain()  # undelayed chunks go out together, as a fast upstream's would
        if response.truncate:
            return False
        if response.hang:
            await self._hung_up(eof, math.inf)
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async def _hung_up_before_release(self, eof: asyncio.Future, step: threading.Semaphore) -> bool:
        """Wait until the test releases `step`; True, counted, if the client hung up first."""
        released = asyncio.ensure_future(asyncio.to_thread(step.acquire, True, STEP_WAIT_S))
        await asyncio.wait({eof, released}, return_when=asyncio.FIRST_COMPLETED)
        if released.done() or (eof.exception() is None and eof.result()):
            return False
        self.hangups += 1
        return True

    async def _hung_up(self, eof: asyncio.Future, seconds: float) -> bool:
        """Wait `seconds` (math.inf: for ever); True, counted, if the client hung up meanwhile."""
        done, _ = await asyncio.wait({eof}, timeout=None if math.isinf(seconds) else seconds)
        if not done:
            return False
        if eof.exception() is None and eof.result():
            return False  # the client sent more bytes (pipelining, which no client here does): not a hang-up
        self.hangups += 1
        return True


def _head(response: FakeResponse) -> bytes:
    lines = [f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}",
             f"Content-Type: {response.content_type}"]
    if response.chunks is None:
        lines.append(f"Content-Length: {len(response.body)}")
    else:
        lines.append("Transfer-Encoding: chunked")
    lines += [f"{name}: {value}" for name, value in response.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_request(reader: asyncio.StreamReader) -> RecordedRequest | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, target, _version = request_line.split(" ", 2)
    headers = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        body = b""
    return RecordedRequest(method, target, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)
