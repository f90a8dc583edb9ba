"""SandboxError: the one error of the JavaScript sandbox, with a sentence a workflow author can act on."""

from __future__ import annotations

KINDS = ("error", "syntax", "timeout", "memory", "output_too_large", "not_json", "crashed", "busy", "budget")
FINAL_KINDS = ("budget",)  # trying again cannot help: the engine does not retry these


class SandboxError(Exception):
    """An evaluation that gave no value.

    kind: "error" (the code threw), "syntax", "timeout", "memory", "output_too_large", "not_json" (the result
    cannot become JSON), "crashed" (the worker died or could not start), "busy" (no worker was free within the
    queue-wait limit; nothing ran) or "budget" (the run's sandbox time is spent). message: the sentence to
    show. `retryable` is False when trying again cannot succeed (a spent budget).
    """

    def __init__(self, kind: str, message: str) -> None:
        assert kind in KINDS, kind
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retryable = kind not in FINAL_KINDS

    def __repr__(self) -> str:
        return f"SandboxError({self.kind!r}, {self.message!r})"


def seconds(value: float) -> str:
    return f"{value:g} s"


def megabytes(value_bytes: float) -> str:
    return f"{value_bytes / 1_000_000:.3g} MB"


def error_from_answer(
    kind: str, detail: str, *, time_limit_s: float, memory_mb: int, output_cap_bytes: int
) -> SandboxError:
    """Turn a worker's failed answer into the sentence for the author."""
    if kind == "error":
        return SandboxError(kind, f"The code threw an error: {detail}")
    if kind == "syntax":
        return SandboxError(kind, f"The JavaScript does not compile: {detail}")
    if kind == "timeout":
        return SandboxError(kind, f"The code ran longer than {seconds(time_limit_s)} and was stopped.")
    if kind == "memory":
        return SandboxError(kind, f"The code used more than {memory_mb} MB of memory and was stopped.")
    if kind == "output_too_large":
        size = megabytes(int(detail)) if detail.isdigit() else "too much"
        return SandboxError(kind, f"The result is {size} of JSON, more than the {megabytes(output_cap_bytes)} allowed.")
    if kind == "not_json":
        return SandboxError(kind, f"The result cannot be turned into JSON: {detail}")
    return SandboxError("crashed", f"The JavaScript sandbox stopped unexpectedly ({detail}); try again.")


def budget_spent(budget_s: float) -> SandboxError:
    return SandboxError("budget", f"The run has used all of its {seconds(budget_s)} of JavaScript sandbox time "
                                  "(retries included): this node was stopped or not started, and is not retried.")


def busy(wait_s: float) -> SandboxError:
    return SandboxError("busy", f"The JavaScript sandbox is busy: no worker was free within {seconds(wait_s)}, "
                                "so the code did not run; try again later.")
