"""A small A2A agent built with a2a-sdk's own server classes, served by uvicorn on a loopback port in a thread.

Its executor answers by the message's first word: `fail` fails the task (with a status message), `ask` asks for
more input, `slow` waits until cancelled, `reject` rejects it, `reply` answers with a Message instead of a task;
anything else is echoed as an artifact (`echo: <text>`), in three chunks when the card says streaming. Every
request's headers are recorded, and every cancel.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Role
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

RPC_PATH = "/rpc"
SLOW_S = 30.0


class ScriptedExecutor(AgentExecutor):
    def __init__(self, streaming: bool, cancelled: list[str]):
        self.streaming = streaming
        self.cancelled = cancelled

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        word = text.split(" ", 1)[0]
        if word == "reply":
            await event_queue.enqueue_event(new_text_message(f"message: {text}", role=Role.ROLE_AGENT))
            return
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if word == "fail":
            await updater.failed(updater.new_agent_message([Part(text="the vault is closed")]))
        elif word == "reject":
            await updater.reject(updater.new_agent_message([Part(text="not my job")]))
        elif word == "ask":
            await updater.requires_input(updater.new_agent_message([Part(text="which city?")]))
        elif word == "slow":
            await asyncio.sleep(SLOW_S)
            await updater.complete()
        elif self.streaming:
            for index, chunk in enumerate(["echo: ", text[: len(text) // 2], text[len(text) // 2:]]):
                await updater.add_artifact([Part(text=chunk)], artifact_id="answer", append=index > 0,
                                           last_chunk=index == 2)
            await updater.complete()
        else:
            await updater.add_artifact([Part(text=f"echo: {text}")], artifact_id="answer")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.cancelled.append(context.task_id or "")
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


@dataclass
class RemoteAgent:
    """The agent's app on 127.0.0.1:<port>; `headers` holds each request's headers (lower-cased names)."""

    name: str = "Echo agent"
    streaming: bool = False
    headers: list[dict[str, str]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def card_url(self) -> str:
        return f"{self.base_url}/.well-known/agent-card.json"

    def card(self) -> AgentCard:
        return AgentCard(
            name=self.name, description="Echoes what it is sent.", version="1.2.3",
            supported_interfaces=[AgentInterface(url=self.base_url + RPC_PATH, protocol_binding="JSONRPC",
                                                 protocol_version="1.0")],
            capabilities=AgentCapabilities(streaming=self.streaming),
            default_input_modes=["text/plain"], default_output_modes=["text/plain"],
            skills=[AgentSkill(id="echo", name="Echo", description="Says it back.", tags=["test", "echo"])])

    def app(self):
        card = self.card()
        handler = DefaultRequestHandler(agent_executor=ScriptedExecutor(self.streaming, self.cancelled),
                                        task_store=InMemoryTaskStore(), agent_card=card)
        routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, RPC_PATH),
                  Route("/not-a-card.json", lambda request: JSONResponse({"hello": "world"})),
                  Route("/broken.json", lambda request: Response("{not json", media_type="application/json")),
                  Route("/gone.json", lambda request: JSONResponse({"error": "gone"}, status_code=410)),
                  Route("/huge.json", lambda request: Response(b"[" + b"0," * 600_000 + b"0]",
                                                               media_type="application/json"))]
        inner = Starlette(routes=routes)
        recorded = self.headers

        async def app(scope, receive, send):
            if scope["type"] == "http":
                recorded.append({key.decode("latin-1").lower(): value.decode("latin-1")
                                 for key, value in scope["headers"]})
            await inner(scope, receive, send)

        return app


class Served:
    """uvicorn serving a RemoteAgent in a daemon thread; stop() shuts it down."""

    def __init__(self, agent: RemoteAgent):
        self.agent = agent
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.socket = sock
        agent.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(agent.app(), log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)

    def start(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 5
        while not self.server.started:
            if time.monotonic() > deadline:
                raise AssertionError("within 5 s: the remote A2A agent did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)
        self.socket.close()
