"""The legacy SSE transport of `/mcp/sse`, served by whichever processes the requests reach.

The SDK's `SseServerTransport` finds a session's stream in the memory of the process that took the POST, so a
message posted to another process of the deployment is lost (404). Here the GET's process runs the MCP session
and listens for its messages through a relay (mcpbridge.relay); the POST's process checks the message and
hands it over. Every message runs with the stream's request as its context (its user and API key): the relay
hands a message over only when the POST's credential names the same principal that opened the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import parse_qs, quote
from uuid import UUID, uuid4

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response

from mcpbridge.relay import Relay

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
UNAVAILABLE = "The MCP message relay is unavailable; try again."


class SseSessions:
    """GET `serve` opens a session's stream and runs its MCP session; POST `post` hands a message to it."""

    def __init__(self, messages_path: str, relay: Relay) -> None:
        self.messages_path = messages_path
        self.relay = relay

    async def serve(self, server: Server, owner: str, scope: Scope, receive: Any, send: Any) -> None:
        session_id = uuid4().hex
        context = Request(scope, receive)  # what every message of the session carries as its request
        endpoint = f"{quote(self.messages_path)}?session_id={session_id}"
        async with contextlib.AsyncExitStack() as stack:
            try:
                inbox = await stack.enter_async_context(self.relay.listen(session_id, owner))
            except Exception:  # a boundary: the relay's transport (Redis, a socket) failed
                logger.exception("Could not listen for the messages of an MCP SSE stream")
                return await Response(UNAVAILABLE, status_code=503)(scope, receive, send)
            await self._run(server, context, inbox, endpoint, scope, receive, send)

    async def _run(self, server: Server, context: Request, inbox: asyncio.Queue[bytes], endpoint: str,
                   scope: Scope, receive: Any, send: Any) -> None:
        """The stream's events and its MCP session, until the client hangs up."""
        read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
        write_stream, write_reader = create_context_streams[SessionMessage](0)
        events_writer, events_reader = anyio.create_memory_object_stream[dict[str, Any]](0)

        async def send_events() -> None:
            async with events_writer, write_reader:
                await events_writer.send({"event": "endpoint", "data": endpoint})
                async for message in write_reader:
                    await events_writer.send({"event": "message", "data": message.message.model_dump_json(
                        by_alias=True, exclude_unset=True)})

        async def pass_messages() -> None:
            while True:
                body = await inbox.get()
                try:
                    message = types.jsonrpc_message_adapter.validate_json(body, by_name=False)
                except ValidationError:
                    continue  # checked before it was handed over; a relay of another version, perhaps
                await read_writer.send(SessionMessage(message, metadata=ServerMessageMetadata(
                    request_context=context)))

        async with anyio.create_task_group() as tasks:
            async def respond() -> None:
                await EventSourceResponse(content=events_reader, data_sender_callable=send_events)(
                    scope, receive, send)
                # The client hung up (or the stream's credential died): the MCP session ends with it.
                await read_writer.aclose()
                await write_reader.aclose()
                await events_reader.aclose()

            tasks.start_soon(respond)
            tasks.start_soon(pass_messages)
            try:
                await server.run(read_stream, write_stream, server.create_initialization_options())
            finally:
                tasks.cancel_scope.cancel()

    async def post(self, owner: str, scope: Scope, receive: Any, send: Any) -> None:
        if scope["method"] != "POST":
            return await Response(status_code=405, headers={"Allow": "POST"})(scope, receive, send)
        request = Request(scope, receive)
        values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_id")
        if not values:
            return await Response("session_id is required", status_code=400)(scope, receive, send)
        try:
            session_id = UUID(hex=values[0]).hex
        except ValueError:
            return await Response("Invalid session ID", status_code=400)(scope, receive, send)
        body = await request.body()
        try:
            types.jsonrpc_message_adapter.validate_json(body, by_name=False)
        except ValidationError:
            return await Response("Could not parse message", status_code=400)(scope, receive, send)
        try:
            delivered = await self.relay.deliver(session_id, owner, body)
        except Exception:  # a boundary: the relay's transport (Redis, a socket) failed
            logger.exception("Could not hand a message to its MCP SSE stream")
            return await Response(UNAVAILABLE, status_code=503)(scope, receive, send)
        if not delivered:
            logger.info("No open MCP SSE stream %s for this caller", session_id)
            return await Response("Could not find session", status_code=404)(scope, receive, send)
        await Response("Accepted", status_code=202)(scope, receive, send)
