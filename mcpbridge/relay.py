"""The messages a client posts to a legacy SSE session reach the process that holds its stream, whichever process
of the deployment took the POST.

The stream's process listens for its session's messages (`listen`); the process that takes a POST hands the
message over (`deliver`): `HostRelay` (no Redis) over a Unix socket per stream in Linux's abstract namespace,
this host and this user only; `RedisRelay` (REDIS_URL) over the channel layer, any host. `deliver` answers True
only when a live stream of that session, opened by that owner, took the message; a message is handed over once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import struct
from collections.abc import AsyncIterator

from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import connections

logger = logging.getLogger(__name__)

INBOX_SIZE = 64  # messages waiting for the stream's MCP session; past that a POST waits (backpressure)
DELIVER_TIMEOUT_S = 10.0


class Relay:
    """Hands a session's messages to the process holding its stream. Subclasses carry them between processes:
    `_listen_remote` (while the stream lives, put what arrives for it in the inbox) and `_deliver_remote`
    (whether a live stream of that owner took it)."""

    def __init__(self) -> None:
        self._here: dict[str, tuple[str, asyncio.Queue[bytes]]] = {}

    @contextlib.asynccontextmanager
    async def listen(self, session_id: str, owner: str) -> AsyncIterator[asyncio.Queue[bytes]]:
        """The inbox of the stream `session_id` opened by `owner`: the bodies posted for it, in order."""
        inbox: asyncio.Queue[bytes] = asyncio.Queue(INBOX_SIZE)
        self._here[session_id] = (owner, inbox)
        try:
            async with self._listen_remote(session_id, owner, inbox):
                yield inbox
        finally:
            self._here.pop(session_id, None)

    async def deliver(self, session_id: str, owner: str, body: bytes) -> bool:
        """Hand `body` to the stream `session_id` if `owner` opened it and it is still open; whether it did."""
        here = self._here.get(session_id)
        if here is not None:
            if here[0] != owner:
                return False
            await here[1].put(body)
            return True
        return await self._deliver_remote(session_id, owner, body)

    def _listen_remote(self, session_id: str, owner: str,
                       inbox: asyncio.Queue[bytes]) -> contextlib.AbstractAsyncContextManager[None]:
        raise NotImplementedError

    async def _deliver_remote(self, session_id: str, owner: str, body: bytes) -> bool:
        raise NotImplementedError


class HostRelay(Relay):
    """Between the processes of this host: a socket per stream (see the module docstring). A connection carries
    one message: a JSON line `{"owner", "size"}`, `size` bytes of body; the answer is one byte, 1 (taken) or 0."""

    PREFIX = b"\0agentsite-mcp-sse-"

    def address(self, session_id: str) -> bytes:
        database = str(connections["default"].settings_dict["NAME"])
        digest = hashlib.sha256(f"{database}\0{session_id}".encode()).hexdigest()[:32]
        return self.PREFIX + digest.encode()

    @contextlib.asynccontextmanager
    async def _listen_remote(self, session_id: str, owner: str, inbox: asyncio.Queue[bytes]) -> AsyncIterator[None]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.address(session_id))
            sock.listen(64)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise

        async def receive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _take(reader, writer, owner, inbox)

        server = await asyncio.start_unix_server(receive, sock=sock)
        try:
            yield
        finally:
            server.close()

    async def _deliver_remote(self, session_id: str, owner: str, body: bytes) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, self.address(session_id))
        except OSError:  # nobody listens there: no such stream on this host (any more)
            sock.close()
            return False
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        try:
            async with asyncio.timeout(DELIVER_TIMEOUT_S):
                writer.write(json.dumps({"owner": owner, "size": len(body)}).encode() + b"\n" + body)
                await writer.drain()
                return await reader.read(1) == b"1"
        except (OSError, TimeoutError):
            logger.warning("An MCP message could not be handed to the process holding its stream", exc_info=True)
            return False
        finally:
            writer.close()


async def _take(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, owner: str,
                inbox: asyncio.Queue[bytes]) -> None:
    """One message from a connection to a stream's socket, taken only from a process of this user and for the
    stream's owner; the answer says whether it was."""
    taken = False
    try:
        if _peer_uid(writer) == os.getuid():
            async with asyncio.timeout(DELIVER_TIMEOUT_S):
                header = json.loads(await reader.readline())
                size = int(header["size"])
                if header.get("owner") == owner and 0 <= size <= _max_body():
                    body = await reader.readexactly(size)
                    await inbox.put(body)
                    taken = True
        writer.write(b"1" if taken else b"0")
        await writer.drain()
    except (OSError, TimeoutError, ValueError, KeyError, TypeError, asyncio.IncompleteReadError):
        logger.info("Refused a malformed MCP message relay", exc_info=True)
    finally:
        writer.close()


def _peer_uid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                              struct.calcsize("3i")))
    except (OSError, AttributeError):
        return None
    return uid


def _max_body() -> int:
    return int(getattr(settings, "MAX_BODY_BYTES", 4 * 1024 * 1024))


class RedisRelay(Relay):
    """Between processes on any host: the channel layer on Redis (see the module docstring)."""

    TTL_S = 60.0  # the stream's entry in the cache; refreshed every third of it while the stream lives

    def _key(self, session_id: str) -> str:
        return f"mcp-sse:{session_id}"

    @contextlib.asynccontextmanager
    async def _listen_remote(self, session_id: str, owner: str, inbox: asyncio.Queue[bytes]) -> AsyncIterator[None]:
        layer = get_channel_layer()
        channel = await layer.new_channel("mcp-sse.")
        entry = {"channel": channel, "owner": owner}
        await cache.aset(self._key(session_id), entry, self.TTL_S)

        async def receive() -> None:
            while True:
                message = await layer.receive(channel)
                await inbox.put(message["body"])

        async def refresh() -> None:
            while True:
                await asyncio.sleep(self.TTL_S / 3)
                try:
                    await cache.aset(self._key(session_id), entry, self.TTL_S)
                except Exception:  # noqa: BLE001 - Redis away for a moment: the next refresh tries again
                    logger.warning("Could not refresh an MCP SSE stream's entry in the cache", exc_info=True)

        tasks = [asyncio.create_task(receive()), asyncio.create_task(refresh())]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):  # else it expires within TTL_S
                await cache.adelete(self._key(session_id))

    async def _deliver_remote(self, session_id: str, owner: str, body: bytes) -> bool:
        entry = await cache.aget(self._key(session_id))
        if not isinstance(entry, dict) or entry.get("owner") != owner:
            return False
        await get_channel_layer().send(entry["channel"], {"type": "mcp.message", "body": body})
        return True


def relay_for_settings() -> Relay:
    """The relay this deployment needs: through Redis when it has one, else between this host's processes."""
    return RedisRelay() if getattr(settings, "REDIS_URL", "") else HostRelay()
