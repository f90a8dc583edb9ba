"""A light load generator and a light paced upstream, for throughput figures on a small machine.

On 2 cores, bench/compat.py's own client (aiohttp, a task per request reading every chunk) and its fake upstream
(tests/fakes: a thread per stream, each sleeping between tokens) took about three quarters of a core beside
the server at concurrency 128 (bench/RESULTS.md): the harness, not the server, set the ceiling, and a second
server worker had nothing left to run on. These two do the same work on the wire for a fraction of that:

- `TickerUpstream`: an OpenAI-compatible upstream (POST /v1/chat/completions, GET /v1/models) on asyncio alone.
  A streamed reply gets its headers at once, then one timer, every `pace_ms`, writes the next token to every
  open stream (one wake-up a tick for all of them, not one a stream), then the finish chunk and `[DONE]`.
- `LightClient`: HTTP/1.1 over one kept-alive connection per concurrent caller, sending a prepared request and
  reading the reply only as far as finding its end (the chunked body's last chunk, or Content-Length bytes).
  A streamed reply is read every `read_every_s` (20 ms) rather than at each event: the socket's buffer holds
  what came meanwhile (a 100-token reply is ~27 KB), so a read takes several events at once. The server still
  writes every event on its own as it comes; only this client's cost stops growing with the event rate.

Both speak the same bytes as the real thing: the server under test cannot tell them from an SDK and a model.

    python bench/loadgen.py upstream --tokens 100 --pace-ms 5      # prints its base URL (…/v1)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time

FINISH = b"0\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class TickerUpstream:
    """See the module docstring. `run()` serves until cancelled; `base_url` once started."""

    def __init__(self, tokens: int, pace_ms: float, host: str = "127.0.0.1", port: int = 0) -> None:
        self.tokens, self.pace = tokens, pace_ms / 1000
        self.host, self.port = host, port
        # open streams: [tokens sent so far, the future their connection's task waits on]
        self.streams: dict[asyncio.StreamWriter, list] = {}
        self.base_url = ""
        cid = "chatcmpl-ticker"
        base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": "fake-model"}
        self.head = _chunk(_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                         "finish_reason": None}]}))
        self.token_chunks = [_chunk(_event({**base, "choices": [{"index": 0, "delta": {"content": f"tok{i} "},
                                                                 "finish_reason": None}]}))
                             for i in range(tokens)]
        self.tail = _chunk(_event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 5, "completion_tokens": tokens,
                                             "total_tokens": tokens + 5}})
                           + b"data: [DONE]\n\n") + FINISH
        whole = json.dumps({"id": cid, "object": "chat.completion", "created": int(time.time()), "model": "fake-model",
                            "choices": [{"index": 0, "message": {"role": "assistant",
                                                                 "content": "".join(f"tok{i} " for i in range(tokens))},
                                         "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 5, "completion_tokens": tokens,
                                      "total_tokens": tokens + 5}}).encode()
        self.whole = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(whole)
                      + whole)
        models = json.dumps({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}).encode()
        self.models = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                       % len(models) + models)
        self.stream_head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                            b"Cache-Control: no-cache\r\n\r\n")

    async def run(self, started: asyncio.Future | None = None) -> None:
        server = await asyncio.start_server(self._serve, self.host, self.port)
        port = server.sockets[0].getsockname()[1]
        self.base_url = f"http://{self.host}:{port}/v1"
        if started is not None:
            started.set_result(self.base_url)
        ticker = asyncio.create_task(self._tick())
        try:
            async with server:
                await server.serve_forever()
        finally:
            ticker.cancel()

    async def _tick(self) -> None:
        next_at = time.monotonic()
        while True:
            next_at += self.pace
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            for writer, state in list(self.streams.items()):
                sent, done = state
                if writer.is_closing():
                    del self.streams[writer]
                    done.set_result(None)
                elif sent < self.tokens:
                    writer.write(self.token_chunks[sent])
                    state[0] = sent + 1
                else:
                    writer.write(self.tail)
                    del self.streams[writer]
                    done.set_result(None)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                if head.startswith(b"GET"):
                    writer.write(self.models)
                elif b'"stream": true' in body or b'"stream":true' in body:
                    writer.write(self.stream_head + self.head)
                    done = asyncio.get_running_loop().create_future()
                    self.streams[writer] = [0, done]
                    await done  # the ticker writes the tokens and the end (HTTP/1.1: one reply at a time)
                else:
                    writer.write(self.whole)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            state = self.streams.pop(writer, None)
            if state is not None and not state[1].done():
                state[1].cancel()
            writer.close()


class LightClient:
    """POSTs of one prepared JSON body over one kept-alive connection (one caller's; not shared)."""

    def __init__(self, base_url: str, api_key: str, read_every_s: float = 0.02) -> None:
        rest = base_url.split("://", 1)[1]
        hostport, _, path = rest.partition("/")
        self.host, _, port = hostport.partition(":")
        self.port = int(port or 80)
        self.prefix = "/" + path.rstrip("/")
        self.api_key = api_key
        self.read_every_s = read_every_s
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    def prepared(self, path: str, body: dict) -> bytes:
        data = json.dumps(body).encode()
        return (f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Authorization: Bearer {self.api_key}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode() + data

    async def send(self, request: bytes) -> int:
        """Send a prepared request and read its whole reply; its status."""
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        assert self.reader is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        lowered = head.lower()
        if b"transfer-encoding: chunked" in lowered:
            tail = b""
            while not tail.endswith(b"\r\n" + FINISH):  # the chunked body's last chunk
                if self.read_every_s:
                    await asyncio.sleep(self.read_every_s)
                data = await self.reader.read(1 << 20)
                if not data:
                    raise ConnectionError("the server closed the connection mid-reply")
                tail = (tail + data)[-16:]
        else:
            marker = lowered.find(b"content-length:")
            length = int(lowered[marker + 15:lowered.index(b"\r\n", marker)]) if marker >= 0 else 0
            if length:
                await self.reader.readexactly(length)
        if b"connection: close" in lowered:
            self.writer.close()
            self.writer = None
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def throughput(base_url: str, api_key: str, model: str, concurrency: int, seconds: float, stream: bool
                     ) -> tuple[int, float]:
    """(replies completed, seconds) with `concurrency` callers sending one after another for `seconds`."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def caller() -> None:
        nonlocal done
        client = LightClient(base_url, api_key)
        request = client.prepared("/chat/completions", {
            "model": model, "stream": stream, "messages": [{"role": "user", "content": "Count for me."}]})
        try:
            while time.perf_counter() < deadline:
                status = await client.send(request)
                if status != 200:
                    raise RuntimeError(f"the target answered {status}")
                done += 1
        finally:
            client.close()

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return done, time.perf_counter() - started


def serve_upstream(tokens: int, pace_ms: float) -> None:
    """Run a TickerUpstream until SIGTERM/SIGINT, printing its base URL first."""

    async def main() -> None:
        started: asyncio.Future = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(TickerUpstream(tokens, pace_ms).run(started))
        print(await started, flush=True)
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(signum, stop.set)
        await stop.wait()
        task.cancel()

    asyncio.run(main())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("upstream",))
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--pace-ms", type=float, default=5.0)
    options = parser.parse_args()
    serve_upstream(options.tokens, options.pace_ms)
