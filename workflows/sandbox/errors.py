"""SandboxError: the one error of the JavaScript sandbox, with a sentence a workflow author can act on."""

from __future__ import annotations

KINDS = ("error", "syntax", "timeout", "memory", "output_too_large", "not_json", "crashed")


class SandboxError(Exception):
    """An evaluation that gave no value.

    kind: "error" (the code threw), "syntax", "timeout", "memory", "output_too_large", "not_json" (the result
    cannot become JSON) or "crashed" (the worker died or could not start). message: the sentence to show.
    """

    def __init__(self, kind: str, message: str) -> None:
        assert kind in KINDS, kind
        super().__init__(message)
        self.kind = kind
        self.message = message

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
