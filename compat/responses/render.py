"""The Responses door's replies: output items, and the stream as the typed `response.*` events, each with its
`sequence_number` (a Renderer for compat.stream). The commonest events leave from byte templates, byte for byte
what encoding their objects gives (tests/compat/test_chunk_bytes.py holds them)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agentsite.agent.types import Completion, Finish, StreamEvent, TextDelta, ToolCall, ToolCallEvent, Usage
from agentsite.core.errors import AppError
from agentsite.core.sse import Problem, json_text, sse_event
from compat.responses.run import ResponseRun, status_of
from compat.responses.wire import item_id
from compat.stream import Renderer, drive


def message_item(item_id: str, text: str, status: str = "completed",
                 logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}] \
        if status == "completed" else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(call: ToolCall, arguments: str | None = None, status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{call.id}", "call_id": call.id, "name": call.name,
            "arguments": call.arguments_text if arguments is None else arguments, "status": status}


def output_items(reply: Completion) -> list[dict[str, Any]]:
    items = [message_item(item_id(), reply.text, logprobs=reply.logprobs)] if reply.text or not reply.tool_calls \
        else []
    return items + [call_item(call) for call in reply.tool_calls]


def _delta_template(item_id: str, index: int) -> bytes:
    """A response.output_text.delta event of this item as a %-template: `template % (JSON text, number)` is
    byte for byte what emit("response.output_text.delta", ...) gives, without building and encoding it (the
    item id is `msg_` and hex digits, the index a number: neither needs escaping; tests/compat hold the bytes)."""
    return (b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "item_id": "%s", '
            b'"output_index": %d, "content_index": 0, "delta": %%s, "logprobs": [], "sequence_number": %%d}\n\n'
            % (item_id.encode(), index))


def _wrapped(kind: str, name: str, value: bytes, sequence: int) -> bytes:
    """sse_event({"type": kind, name: value, "sequence_number": sequence}, kind) for a value already encoded
    (`json.dumps(value)`): the created and in_progress events carry the same response object, encoded once."""
    return b'event: %s\ndata: {"type": "%s", "%s": %s, "sequence_number": %d}\n\n' % (
        kind.encode(), kind.encode(), name.encode(), value, sequence)


# The events that open a message item and those that close it, as %-templates (item id, output index, sequence
# number; closing: the whole text's JSON, the part and the item already encoded): the whole text is encoded once,
# not four times (the three closing events and the response object that ends the stream).
_ITEM_ADDED = (b'event: response.output_item.added\ndata: {"type": "response.output_item.added", "output_index": %d, '
               b'"item": {"type": "message", "id": "%s", "status": "in_progress", "role": "assistant", "content": []}, '
               b'"sequence_number": %d}\n\n')
_PART_ADDED = (b'event: response.content_part.added\ndata: {"type": "response.content_part.added", "item_id": "%s", '
               b'"output_index": %d, "content_index": 0, "part": {"type": "output_text", "text": "", '
               b'"annotations": [], "logprobs": []}, "sequence_number": %d}\n\n')
_TEXT_DONE = (b'event: response.output_text.done\ndata: {"type": "response.output_text.done", "item_id": "%s", '
              b'"output_index": %d, "content_index": 0, "text": %s, "logprobs": %s, "sequence_number": %d}\n\n')
_PART_DONE = (b'event: response.content_part.done\ndata: {"type": "response.content_part.done", "item_id": "%s", '
              b'"output_index": %d, "content_index": 0, "part": %s, "sequence_number": %d}\n\n')
_ITEM_DONE = (b'event: response.output_item.done\ndata: {"type": "response.output_item.done", "output_index": %d, '
              b'"item": %s, "sequence_number": %d}\n\n')


class ResponseRenderer(Renderer):
    """A run's typed events: `response.created` and `response.in_progress` first; per text item its added, part,
    deltas and done events; per tool call its added, arguments and done events; `response.completed` (or
    `response.incomplete`) last, after the run stored its response; `response.failed` for a failure."""

    where = "/v1/responses"

    def __init__(self, run: ResponseRun):
        super().__init__()
        self.run = run
        self.sequence = 0
        self.output: list[dict[str, Any]] = []  # the response's items, and each encoded (the closing event's bytes)
        self.encoded: list[bytes] = []
        self.usage = Usage()
        self.finish = "stop"
        self.text: list[str] = []
        self.logprobs: list[dict[str, Any]] = []  # the open message's, when the upstream sends them
        self.open_message: dict[str, Any] | None = None
        self.delta_template: bytes | None = None  # the open message's
        opening = run.response_json(status="in_progress", output=[], usage=None)
        self.out += [_wrapped("response.created", "response", opening, 0),
                     _wrapped("response.in_progress", "response", opening, 1)]
        self.sequence = 2

    def emit(self, kind: str, **fields: Any) -> None:
        self.out.append(sse_event({"type": kind, **fields, "sequence_number": self.sequence}, kind))
        self.sequence += 1

    def fast(self, batch: list[StreamEvent]) -> bytes | None:  # type: ignore[override]
        """Most batches are one text delta of the open message (a model streams a token per read): its template,
        without render's dispatch and the join (render gives the same bytes)."""
        template = self.delta_template
        if template is None or len(batch) != 1:
            return None
        event = batch[0]
        if type(event) is not TextDelta or not event.text or event.logprobs is not None:
            return None
        self.text.append(event.text)
        piece = template % (json_text(event.text), self.sequence)
        self.sequence += 1
        return piece

    def render(self, batch: list[StreamEvent]) -> None:
        for event in batch:
            if isinstance(event, TextDelta) and event.text:
                self._text(event)
            elif isinstance(event, ToolCallEvent):
                self._call(event.call)
            elif isinstance(event, Usage):
                self.usage = event
            elif isinstance(event, Finish):
                self.finish = event.reason

    def _text(self, event: TextDelta) -> None:
        if self.open_message is None:
            self.open_message = message_item(item_id(), "", status="in_progress")
            raw_id, index = self.open_message["id"].encode(), len(self.output)
            self.out.extend((_ITEM_ADDED % (index, raw_id, self.sequence),
                             _PART_ADDED % (raw_id, index, self.sequence + 1)))
            self.sequence += 2
            # Most of a stream's events: one template per message item (its id and index are fixed).
            self.delta_template = _delta_template(self.open_message["id"], index)
        self.text.append(event.text)
        if event.logprobs is None:
            self.out.append(self.delta_template % (json_text(event.text), self.sequence))  # type: ignore[operator]
            self.sequence += 1
        else:  # the upstream's log probabilities of these tokens, relayed
            self.logprobs.extend(event.logprobs)
            self.emit("response.output_text.delta", item_id=self.open_message["id"], output_index=len(self.output),
                      content_index=0, delta=event.text, logprobs=event.logprobs)

    def _call(self, call: ToolCall) -> None:
        self.close_message()
        index, arguments = len(self.output), call.arguments_text
        item = call_item(call)
        self.emit("response.output_item.added", output_index=index,
                  item=call_item(call, arguments="", status="in_progress"))
        self.emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=arguments)
        self.emit("response.function_call_arguments.done", item_id=item["id"], output_index=index, name=call.name,
                  arguments=arguments)
        self.emit("response.output_item.done", output_index=index, item=item)
        self.output.append(item)
        self.encoded.append(json.dumps(item).encode())

    def close_message(self) -> None:
        message = self.open_message
        if message is None:
            return
        index, sequence, whole = len(self.output), self.sequence, "".join(self.text)
        whole_json, raw_id = json_text(whole), message["id"].encode()
        probs = json.dumps(self.logprobs).encode() if self.logprobs else b"[]"
        part = b'{"type": "output_text", "text": %s, "annotations": [], "logprobs": %s}' % (whole_json, probs)
        item = (b'{"type": "message", "id": "%s", "status": "completed", "role": "assistant", "content": [%s]}'
                % (raw_id, part))
        self.out.extend((_TEXT_DONE % (raw_id, index, whole_json, probs, sequence),
                         _PART_DONE % (raw_id, index, part, sequence + 1), _ITEM_DONE % (index, item, sequence + 2)))
        self.sequence += 3
        self.output.append(message_item(message["id"], whole, logprobs=list(self.logprobs)))
        self.encoded.append(item)
        self.open_message = self.delta_template = None
        self.text.clear()
        self.logprobs.clear()

    async def close(self) -> None:
        self.close_message()
        run, status = self.run, status_of("completed", self.finish)[0]
        if run.spec.store:
            await run.store(run.response(status="completed", output=self.output, usage=self.usage,
                                         finish=self.finish))
        kind = "response.completed" if status == "completed" else "response.incomplete"
        self.out.append(_wrapped(kind, "response", run.response_json(status=status, output=self.encoded,
                                                                     usage=self.usage), self.sequence))

    def failed(self, exc: AppError) -> bytes:
        error = {"code": exc.code, "message": exc.message}
        self.emit("response.failed", response=self.run.response(status="failed", output=self.output, usage=None,
                                                                error=error))
        return self.out.pop()


def events(run: ResponseRun, first: list[StreamEvent], batches: AsyncIterator[list[StreamEvent]],
           problem: Problem | None = None) -> AsyncIterator[bytes]:
    """The run's typed events for `first` and then each batch (compat.stream.drive). `problem` (the caller's
    credential check) is awaited before each piece: once it answers an AppError the upstream is closed and the
    stream ends with `response.failed` carrying it, as any failure of a started response does."""
    return drive(ResponseRenderer(run), first, batches, problem)
