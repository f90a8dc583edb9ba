"""The one stream driver of the /v1 doors: the runtime's event batches in, a dialect's SSE bytes out.

A door gives a `Renderer` (compat/<dialect>/render.py) and the opened stream (compat.run.Run.opened); the driver
sends the first batch's bytes at once, then one piece of bytes per batch (the events ready together), checks the
caller's credential before each (when given), closes the upstream on the way out (a hang-up cancels it), and ends
a failed stream with the dialect's error event: never a hanging or broken stream.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

from agentsite.agent.types import StreamEvent
from agentsite.core.errors import AppError
from agentsite.core.sse import Problem

logger = logging.getLogger(__name__)

INTERNAL = "The server failed; the error was logged."


class Renderer:
    """One stream in a dialect. `render` appends the bytes of a batch's events to `out`; `fast`, when a dialect
    has one, answers the commonest batch (one text delta) as bytes directly, or None to go through `render`;
    `close` appends the closing events (after the last batch); `failed` is the error event that ends a started
    stream (its AppError, or `internal_error`)."""

    where = "/v1"  # for the log of a failure
    fast: Callable[[list[StreamEvent]], bytes | None] | None = None

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def render(self, batch: list[StreamEvent]) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def failed(self, exc: AppError) -> bytes:
        raise NotImplementedError


async def drive(renderer: Renderer, first: list[StreamEvent], batches: AsyncIterator[list[StreamEvent]],
                problem: Problem | None = None) -> AsyncIterator[bytes]:
    """The renderer's bytes for `first` and then each batch. `problem` (the caller's credential check) is awaited
    before each piece: once it answers an AppError the upstream is closed and the stream ends with it."""
    out, render, fast = renderer.out, renderer.render, renderer.fast
    try:
        async with aclosing(batches):
            render(first)
            await _stands(problem)
            yield b"".join(out)
            out.clear()
            async for batch in batches:
                if problem is not None:
                    await _stands(problem)
                if fast is not None:
                    piece = fast(batch)
                    if piece is not None:
                        yield piece
                        continue
                render(batch)
                if out:
                    yield b"".join(out)
                    out.clear()
        await renderer.close()
    except AppError as exc:
        out.append(renderer.failed(exc))
        yield b"".join(out)
        return
    except Exception:  # a boundary: never a hanging or broken stream
        logger.exception("The %s stream failed", renderer.where)
        out.append(renderer.failed(AppError("internal_error", INTERNAL, 500)))
        yield b"".join(out)
        return
    yield b"".join(out)


async def _stands(problem: Problem | None) -> None:
    failed = await problem() if problem is not None else None
    if failed is not None:
        raise failed
