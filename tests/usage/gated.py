"""A streamed reply the test holds in flight: its start goes out at once, its rest when the test releases it."""

from __future__ import annotations

import json
import threading

from tests.fakes.llm import Raw


def gated_stream(step: threading.Semaphore, usage: tuple[int, int]) -> Raw:
    """An OpenAI stream whose first chunk is sent at once and whose rest (text, usage, end) waits for one
    `step.release()`: a call that is admitted and under way, its usage not yet known."""
    def event(data: dict) -> str:
        return f"data: {json.dumps(data)}\n\n"

    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
    start = event({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]})
    rest = (event({**head, "choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "stop"}]})
            + event({**head, "choices": [], "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                                      "total_tokens": sum(usage)}})
            + "data: [DONE]\n\n")
    return Raw(start + rest, pieces=[start, rest], step=step)
