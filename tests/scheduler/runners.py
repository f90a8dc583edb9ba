"""Runners for the scheduler's tests (set with AGENTSITE_SCHEDULER_RUNNER)."""

from __future__ import annotations

import asyncio

CALLS: list[tuple[str, str]] = []


async def recording_runner(*, task, scheduled_for) -> str:
    CALLS.append((str(task.pk), scheduled_for.isoformat()))
    return f"ran {task.name} for {scheduled_for.isoformat()}"


async def failing_runner(*, task, scheduled_for) -> str:
    raise RuntimeError("the runner broke")


async def slow_runner(*, task, scheduled_for) -> str:
    await asyncio.sleep(5)
    return "too late"


IN_FLIGHT = {"now": 0, "most": 0}


async def overlapping_runner(*, task, scheduled_for) -> str:
    """Counts how many runs are in progress at once."""
    IN_FLIGHT["now"] += 1
    IN_FLIGHT["most"] = max(IN_FLIGHT["most"], IN_FLIGHT["now"])
    try:
        await asyncio.sleep(0.05)
    finally:
        IN_FLIGHT["now"] -= 1
    return "overlapped"
