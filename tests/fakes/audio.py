"""Fake upstream speech services over real loopback connections, and audio for tests to send.

`speak(text)` is espeak-ng's own WAV of a sentence; `reencode(wav, fmt)` turns it into MP3, WebM/Opus or
Ogg/Opus with PyAV's encoders (no binary fixtures); `tone()` is a short sine tone.

`FakeOpenAIAudio`: OpenAI's audio endpoints, `POST {base_url}/audio/transcriptions` (multipart: file, model,
language, response_format) and `POST {base_url}/audio/speech` (JSON: model, input, voice, response_format).
It records every request (`transcriptions()`, `speeches()` give the parsed ones) and answers, in order, the
replies scripted with `script(...)` (a FakeResponse, or a function of the request returning one); with none
left, a transcription answers `{"text": transcript}` and a speech request a short tone in the asked format.

`FakeEdgeService`: Microsoft's read-aloud websocket as edge-tts speaks to it (speech.config, then ssml; the
service answers turn.start, audio.metadata, binary audio frames with a two-byte header length, turn.end).
A test points edge-tts at it by replacing `edge_tts.communicate.WSS_URL` with `wss_url` (the `fake_edge`
fixture does), so only the network step changes: aiohttp's websocket client, edge-tts' framing and our adapter
all run. `mode`: `audio` (default), `no_audio` (turn.end at once), `stall` (accepts, then says nothing),
`garbage` (audio frames that are not MP3).
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np
from aiohttp import WSMsgType, web

from tests.fakes.http import FakeResponse, FakeServer, RecordedRequest

__all__ = ["FakeEdgeService", "FakeOpenAIAudio", "FormPart", "parse_multipart", "reencode", "speak", "tone"]

CONTENT_TYPES = {"mp3": "audio/mpeg", "wav": "audio/wav"}


def tone(*, seconds: float = 0.5, rate: int = 24_000, fmt: str = "mp3", frequency: float = 440.0) -> bytes:
    """A sine tone encoded by PyAV as mp3 or wav (mono)."""
    samples = (0.3 * np.sin(2 * np.pi * frequency * np.arange(int(seconds * rate)) / rate)).astype(np.float32)
    codec = {"mp3": "libmp3lame", "wav": "pcm_s16le"}[fmt]
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = rate
        resampler = av.AudioResampler(format=stream.format.name, layout="mono", rate=rate)
        for resampled in resampler.resample(frame) + resampler.resample(None):
            out.mux(stream.encode(resampled))
        out.mux(stream.encode(None))
    return buffer.getvalue()


def speak(text: str, *, voice: str = "en-us") -> bytes:
    """espeak-ng's WAV of text (22,050 Hz mono), made by the program itself, not through agentsite."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "speech.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(out), text], check=True, timeout=30)
        return out.read_bytes()


# What browsers and phones record: Opus in WebM (Chrome, Firefox) or Ogg; MP3 for files.
_REENCODINGS = {"mp3": ("mp3", "libmp3lame", None), "webm": ("webm", "libopus", 48_000),
                "ogg": ("ogg", "libopus", 48_000), "wav": ("wav", "pcm_s16le", None)}


def reencode(wav: bytes, fmt: str) -> bytes:
    """The WAV re-encoded by PyAV's encoders as mp3, webm (Opus), ogg (Opus) or wav."""
    container_format, codec, rate = _REENCODINGS[fmt]
    buffer = io.BytesIO()
    with av.open(io.BytesIO(wav), format="wav") as inp, av.open(buffer, mode="w", format=container_format) as out:
        source = inp.streams.audio[0]
        stream = out.add_stream(codec, rate=rate or source.rate, layout="mono")
        resampler = av.AudioResampler(format=stream.format.name, layout="mono", rate=stream.rate)
        for frame in [*inp.decode(source), None]:
            for resampled in resampler.resample(frame):
                out.mux(stream.encode(resampled))
        out.mux(stream.encode(None))
    return buffer.getvalue()


# --- OpenAI's audio endpoints ---------------------------------------------------------------------------

@dataclass
class FormPart:
    name: str
    data: bytes
    filename: str | None = None
    content_type: str | None = None

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


def parse_multipart(request: RecordedRequest) -> dict[str, FormPart]:
    """The parts of a multipart/form-data body by name."""
    content_type = request.headers.get("content-type", "")
    boundary = content_type.partition("boundary=")[2].strip('"')
    if not content_type.startswith("multipart/form-data") or not boundary:
        raise ValueError(f"not multipart/form-data: {content_type!r}")
    parts: dict[str, FormPart] = {}
    for chunk in request.body.split(b"--" + boundary.encode())[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, data = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        headers = {}
        for line in head.decode("utf-8").split("\r\n"):
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        disposition = dict(_parameters(headers.get("content-disposition", "")))
        part = FormPart(disposition["name"], data.removesuffix(b"\r\n"), disposition.get("filename"),
                        headers.get("content-type"))
        parts[part.name] = part
    return parts


def _parameters(header: str):
    for item in header.split(";")[1:]:
        key, _, value = item.strip().partition("=")
        yield key, value.strip('"')


class FakeOpenAIAudio(FakeServer):
    """OpenAI-compatible `/audio/transcriptions` and `/audio/speech`; `base_url` ends in /v1 like OpenAI's."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        super().__init__(host, port)
        self.transcript = "hello from the fake transcriber"
        self._replies: deque[FakeResponse | Callable[[RecordedRequest], FakeResponse]] = deque()
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return super().base_url + "/v1"

    def script(self, *replies: FakeResponse | Callable[[RecordedRequest], FakeResponse]) -> FakeOpenAIAudio:
        with self._lock:
            self._replies.extend(replies)
        return self

    def reset(self) -> None:
        super().reset()
        self.transcript = "hello from the fake transcriber"
        with self._lock:
            self._replies.clear()

    def transcriptions(self) -> list[dict[str, FormPart]]:
        return [parse_multipart(r) for r in self.requests if r.path.endswith("/audio/transcriptions")]

    def speeches(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.requests if r.path.endswith("/audio/speech")]

    def handle(self, request: RecordedRequest) -> FakeResponse:
        if request.method != "POST" or not request.path.endswith(("/audio/transcriptions", "/audio/speech")):
            return FakeResponse.json({"error": {"message": f"no route {request.method} {request.path}"}}, 404)
        with self._lock:
            reply = self._replies.popleft() if self._replies else None
        if reply is not None:
            return reply(request) if callable(reply) else reply
        if request.path.endswith("/audio/transcriptions"):
            parts = parse_multipart(request)
            if "file" not in parts or "model" not in parts:
                return FakeResponse.json({"error": {"message": "file and model are required"}}, 400)
            return FakeResponse.json({"text": self.transcript})
        body = request.json()
        fmt = body.get("response_format", "mp3")
        if not body.get("input") or not body.get("voice") or fmt not in CONTENT_TYPES:
            return FakeResponse.json({"error": {"message": "input, voice and response_format mp3|wav"}}, 400)
        return FakeResponse(200, tone(fmt=fmt), CONTENT_TYPES[fmt])


# --- Microsoft's read-aloud websocket, as edge-tts speaks to it -----------------------------------------------

class FakeEdgeService:
    """start() / stop() (or `with`); `wss_url`, `mode`, `messages` (text frames received), `ssml()`."""

    PATH = "/consumer/speech/synthesize/readaloud/edge/v1"

    def __init__(self) -> None:
        self.mode = "audio"
        self.audio = tone(seconds=1.0, fmt="mp3")
        self.messages: list[str] = []
        self.connections = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def wss_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{self.PATH}?TrustedClientToken=fake"

    def ssml(self) -> list[str]:
        return [message for message in self.messages if "Path:ssml" in message]

    def reset(self) -> None:
        self.mode = "audio"
        self.messages.clear()
        self.connections = 0

    def start(self) -> FakeEdgeService:
        self._thread = threading.Thread(target=self._run, name="FakeEdgeService", daemon=True)
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError("FakeEdgeService did not start listening within 5 s")
        return self

    def stop(self) -> None:
        if self._loop and self._runner:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(5)

    def __enter__(self) -> FakeEdgeService:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._listen())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _listen(self) -> None:
        app = web.Application()
        app.router.add_get(self.PATH, self._websocket)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - aiohttp names no public accessor

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        self.connections += 1
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            self.messages.append(message.data)
            if "Path:ssml" in message.data:
                await self._answer(ws, _request_id(message.data))
        return ws

    async def _answer(self, ws: web.WebSocketResponse, request_id: str) -> None:
        if self.mode == "stall":
            return
        await ws.send_str(_text_frame(request_id, "turn.start", {"context": {"serviceTag": "fake"}}))
        if self.mode != "no_audio":
            await ws.send_str(_text_frame(request_id, "response", {"context": {"serviceTag": "fake"}}))
            audio = self.audio if self.mode == "audio" else b"\x00not an mp3 frame\x00" * 64
            for start in range(0, len(audio), 4096):
                await ws.send_bytes(_audio_frame(request_id, audio[start:start + 4096]))
            await ws.send_str(_text_frame(request_id, "audio.metadata", {"Metadata": [{
                "Type": "SentenceBoundary", "Data": {"Offset": 1_000_000, "Duration": 8_750_000,
                                                     "text": {"Text": "fake", "Length": 4}}}]}))
            await ws.send_bytes(_audio_frame(request_id, b"", content_type=None))
        await ws.send_str(_text_frame(request_id, "turn.end", {"context": {"serviceTag": "fake"}}))


def _request_id(message: str) -> str:
    for line in message.split("\r\n"):
        if line.startswith("X-RequestId:"):
            return line.partition(":")[2]
    return "none"


def _text_frame(request_id: str, path: str, body: dict[str, Any]) -> str:
    return (f"X-RequestId:{request_id}\r\nContent-Type:application/json; charset=utf-8\r\nPath:{path}\r\n\r\n"
            + json.dumps(body))


def _audio_frame(request_id: str, data: bytes, content_type: str | None = "audio/mpeg") -> bytes:
    """The service's binary frame: a big-endian two-byte header length, the headers, then the audio."""
    headers = f"X-RequestId:{request_id}\r\n"
    if content_type:
        headers += f"Content-Type:{content_type}\r\n"
    headers += "X-StreamId:fake\r\nPath:audio\r\n"
    encoded = headers.encode()
    return len(encoded).to_bytes(2, "big") + encoded + data
