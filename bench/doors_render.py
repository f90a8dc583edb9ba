"""What each /v1 door costs in process to render one streamed reply: the same runtime events (a token per
batch, as a paced upstream gives them, then the usage and the finish) through the chat door's `chunks`,
the Responses door's `events` and the Messages door's `message_events`, interleaved round by round.

    python bench/doors_render.py [--tokens 100] [--rounds 30]

Prints, per door, the median and the fastest round's microseconds per stream and the bytes it sends. The
doors' own dialects differ in size (the Responses door sends eight lifecycle events and a sequence number
per delta), so this is the part of "door - chat completions" that is the server's own work; bench/compat.py
--api responses|messages measures the whole request over HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
os.environ.setdefault("AGENTSITE_DATA_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "agentsite-bench-render"))

import django  # noqa: E402

django.setup()

from agentsite.agent.config import AgentSettings  # noqa: E402
from agentsite.agent.types import Finish, StreamEvent, TextDelta, Usage  # noqa: E402
from agentsite.agent.usage import Caller  # noqa: E402
from compat.chat.render import chunks as _chunks  # noqa: E402
from compat.chat.render import completion_id  # noqa: E402
from compat.chat.translate import chat_request  # noqa: E402
from compat.chat.wire import ChatCompletionRequest  # noqa: E402
from compat.messages.render import message_events  # noqa: E402
from compat.responses.render import events as _events  # noqa: E402
from compat.responses.run import ResponseRun  # noqa: E402
from compat.responses.wire import ResponseRequest  # noqa: E402
from compat.run import Run  # noqa: E402


def _batches(tokens: int) -> Callable[[], AsyncIterator[list[StreamEvent]]]:
    deltas = [TextDelta(f" word{index}") for index in range(tokens)]

    async def batches() -> AsyncIterator[list[StreamEvent]]:
        for delta in deltas:
            yield [delta]
        yield [Usage(12, tokens), Finish("stop")]

    return batches


def doors(tokens: int) -> dict[str, Callable[[], Coroutine[Any, Any, int]]]:
    batches = _batches(tokens)
    body = ResponseRequest.model_validate({"model": "agent", "input": "Count for me.", "store": False})
    settings = AgentSettings()

    chat_body = ChatCompletionRequest.model_validate({"model": "agent", "stream": True,
                                                      "messages": [{"role": "user", "content": "Count for me."}]})

    # Each door builds its run (what a request does before its first byte) and renders the events.
    async def chat() -> int:
        run = Run(chat_request(chat_body, {}), settings=settings, user=None)
        return sum([len(piece) async for piece in _chunks([], batches(), cid=completion_id(), model=run.model,
                                                          include_usage=False)])

    async def responses() -> int:
        run = ResponseRun(body, [], settings=settings, user=None, caller=Caller(None, facet="v1"))
        return sum([len(piece) async for piece in _events(run, [], batches())])

    async def messages() -> int:  # its run is a compat.run.Run of the translated request (not built here)
        return sum([len(piece) async for piece in message_events([], batches(), mid="msg_1", model="fake-model")])

    return {"chat completions": chat, "responses": responses, "messages": messages}


async def measure(tokens: int, rounds: int, per_round: int = 100) -> dict[str, dict[str, float]]:
    runs = doors(tokens)
    sizes = {name: await run() for name, run in runs.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for index in range(rounds):
        order = list(runs.items())
        if index % 2:
            order.reverse()
        for name, run in order:
            started = time.perf_counter()
            for _ in range(per_round):
                await run()
            times[name].append((time.perf_counter() - started) / per_round * 1e6)
    return {name: {"median_us": statistics.median(values), "min_us": min(values), "bytes": sizes[name]}
            for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print(f"Rendering a {args.tokens}-token stream, one token per batch, {args.rounds} rounds of 100 per door:")
    figures = asyncio.run(measure(args.tokens, args.rounds))
    chat = figures["chat completions"]
    for name, figure in figures.items():
        extra = "" if figure is chat else (f"  (door - chat: {figure['median_us'] - chat['median_us']:+.1f} us, "
                                           f"{figure['bytes'] - chat['bytes']:+d} bytes)")
        print(f"  {name:17} median {figure['median_us']:7.1f} us  fastest {figure['min_us']:7.1f} us  "
              f"{figure['bytes']:6d} bytes{extra}")


if __name__ == "__main__":
    main()
