"""One call of a remote A2A agent: a user message sent with the remote's headers (blocking, or streamed when its
card says it streams), read into the text of its final answer.

`remote_call` never raises (but CancelledError): every failure is an error result whose text starts with a
code, `<code>: <sentence>`: `remote_unreachable` (connect error, the guard's refusal), `remote_error` (an HTTP
or JSON-RPC error, an answer the SDK cannot read), `task_failed` (the task ended failed, rejected or canceled,
with the remote's status message), `input_required` (the remote asks for more input or for authorization), and
`timeout` (no final answer within AGENTSITE_A2A_TIMEOUT_S; the remote task is then canceled, best-effort).
Imported on the first call (the SDK's client imports starlette), never at start-up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client import A2AClientError, A2AClientTimeoutError, ClientConfig, ClientFactory
from a2a.types import Artifact, CancelTaskRequest, Message, Part, Role, SendMessageRequest, StreamResponse, TaskState
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from a2a_app.cards import BINDINGS, card_loaded
from a2a_app.guard import RemoteRefused, guarded_client
from a2a_app.selectors import RemoteSpec
from agentsite.agent.tooltypes import ToolResult

logger = logging.getLogger(__name__)

CANCEL_TIMEOUT_S = 5.0
_ENDED_BADLY = {TaskState.TASK_STATE_FAILED: "failed", TaskState.TASK_STATE_REJECTED: "rejected",
                TaskState.TASK_STATE_CANCELED: "canceled"}
_ASKS = {TaskState.TASK_STATE_INPUT_REQUIRED: "asks for more input", TaskState.TASK_STATE_AUTH_REQUIRED:
         "asks for authorization"}


@dataclass
class _Answer:
    """The task as its events told it: its id, state, status message and artifacts (chunks appended)."""

    task_id: str = ""
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    status_text: str = ""
    artifacts: dict[str, list[Part]] = field(default_factory=dict)
    message: Message | None = None

    def read(self, event: StreamResponse) -> None:
        if event.HasField("message"):
            self.message = event.message
        elif event.HasField("task"):
            task = event.task
            self.task_id, self.state = task.id, task.status.state
            self.status_text = parts_text(task.status.message.parts)
            self.artifacts = {artifact.artifact_id: list(artifact.parts) for artifact in task.artifacts}
        elif event.HasField("status_update"):
            update = event.status_update
            self.task_id, self.state = update.task_id or self.task_id, update.status.state
            self.status_text = parts_text(update.status.message.parts)
        elif event.HasField("artifact_update"):
            self.task_id = event.artifact_update.task_id or self.task_id
            self._add(event.artifact_update.artifact, append=event.artifact_update.append)

    def _add(self, artifact: Artifact, *, append: bool) -> None:
        parts = self.artifacts.get(artifact.artifact_id)
        if append and parts is not None:
            new = list(artifact.parts)
            # A streamed text is cut anywhere, mid-word too: a chunk's text continues the text before it.
            if parts and new and parts[-1].WhichOneof("content") == new[0].WhichOneof("content") == "text":
                parts[-1] = Part(text=parts[-1].text + new.pop(0).text)
            parts.extend(new)
        else:
            self.artifacts[artifact.artifact_id] = list(artifact.parts)

    def result(self, name: str) -> ToolResult:
        if self.message is not None:
            return ToolResult.of_text(parts_text(self.message.parts))
        said = f": {self.status_text}" if self.status_text else ""
        if self.state == TaskState.TASK_STATE_COMPLETED:
            texts = [parts_text(parts) for parts in self.artifacts.values()]
            return ToolResult.of_text("\n".join(text for text in texts if text) or self.status_text)
        if self.state in _ENDED_BADLY:
            return _error("task_failed", f"The remote agent {name!r} {_ENDED_BADLY[self.state]} the task{said}")
        if self.state in _ASKS:
            return _error("input_required", f"The remote agent {name!r} {_ASKS[self.state]}, which a tool call "
                                            f"cannot give{said}")
        return _error("remote_error", f"The remote agent {name!r} stopped answering with the task in state "
                                      f"{TaskState.Name(self.state)}")


def parts_text(parts: Any) -> str:
    """The text of message or artifact parts: text parts as they are, data parts as JSON, files by name/URL."""
    texts = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
        elif kind == "url":
            texts.append(f"[file: {part.url}]")
        elif kind == "raw":
            texts.append(f"[file: {part.filename or part.media_type or 'bytes'}, {len(part.raw)} bytes]")
    return "\n".join(texts)


def _error(code: str, sentence: str) -> ToolResult:
    return ToolResult.error(f"{code}: {sentence}.")


async def remote_call(spec: RemoteSpec, message: str, *, timeout: float) -> ToolResult:
    """Send `message` to the remote and read its final answer within `timeout` seconds (see the module docstring
    for the errors)."""
    answer = _Answer()
    async with guarded_client(headers=spec.headers, timeout=timeout + 1) as http:
        try:
            async with asyncio.timeout(timeout):
                await _send(spec, message, http, answer)
        except TimeoutError:
            await _cancel(spec, answer.task_id, http)
            return _error("timeout", f"The remote agent {spec.name!r} gave no final answer within {timeout:g} s")
        except RemoteRefused as exc:
            return _error("remote_unreachable", f"The remote agent {spec.name!r}: {exc}")
        except A2AClientTimeoutError:
            return _error("timeout", f"The remote agent {spec.name!r} gave no final answer within {timeout:g} s")
        except A2AClientError as exc:
            code = "remote_unreachable" if isinstance(exc.__cause__, httpx.RequestError) else "remote_error"
            return _error(code, f"The remote agent {spec.name!r} failed: {exc}")
        except (A2AError, ValueError) as exc:  # a JSON-RPC error the SDK maps, an answer it cannot read
            return _error("remote_error", f"The remote agent {spec.name!r} failed: {type(exc).__name__}: {exc}")
    return answer.result(spec.name)


async def _send(spec: RemoteSpec, message: str, http: httpx.AsyncClient, answer: _Answer) -> None:
    card = card_loaded(spec.card)
    config = ClientConfig(streaming=bool(card.capabilities.streaming), httpx_client=http,
                          supported_protocol_bindings=list(BINDINGS))
    client = ClientFactory(config).create(card)
    # The SDK's new_text_message would make the agent's role: a message to a remote is the user's.
    request = SendMessageRequest(message=Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
                                                 parts=[Part(text=message)]))
    async for event in client.send_message(request):
        answer.read(event)


async def _cancel(spec: RemoteSpec, task_id: str, http: httpx.AsyncClient) -> None:
    """Ask the remote to cancel the task (best-effort: a failure is logged, never raised)."""
    if not task_id:
        return
    try:
        async with asyncio.timeout(CANCEL_TIMEOUT_S):
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http,
                                                supported_protocol_bindings=list(BINDINGS))
                                   ).create(card_loaded(spec.card))
            await client.cancel_task(CancelTaskRequest(id=task_id))
    except Exception as exc:  # a boundary: the call has already failed; the cancel is a courtesy
        logger.info("Canceling task %s at the remote agent %r failed: %s", task_id, spec.name, exc)
