"""The JavaScript sandbox of workflows: `code` and `condition` nodes run in V8 in separate, bare worker processes."""

# Use:
#     from workflows.sandbox import SandboxError, sandbox_pool
#
#     value = await sandbox_pool().run_code("return input.n + 1", input={"n": 1})       # 2
#     flag = await sandbox_pool().run_condition("input.n > 1", input={"n": 1})         # False
#     problem = await sandbox_pool().compile_problem("return }", kind="code")          # "SyntaxError: ..."
#
# Guarantees (each proved by tests/workflows/test_sandbox.py):
# - Isolation from the host: workers are separate processes with no Django, no database connection and no secret
#   in their environment, under resource limits; V8 inside them has no require/process/fetch/import/timers.
# - Isolation between evaluations: every built-in and globalThis are frozen once per V8 context, user code runs in
#   strict mode in a fresh function with freshly parsed input/context, and the context is rebuilt every
#   `context_evaluations` runs; a worker that timed out, ran out of memory or failed is replaced.
# - Fairness: an evaluation carries its owner; one owner holds at most its share of the workers, freed workers
#   go to the owner holding the fewest, a wait for a worker is limited ("busy"), and a run's evaluations share
#   a budget of sandbox time, retries included ("budget", never retried).
# - Limits per evaluation: time (default 1 s), V8 heap (default 64 MB), result JSON (default 1 MB). Work the code
#   queued (promise jobs, async functions, `await`) runs within the same time limit: an answer comes only once
#   V8 is idle, so nothing an evaluation started runs after it, or on the next caller's time. Failures are
#   SandboxError with a `kind` and an author-facing `message`; the calling process never fails with a worker.
#
# The worker script (worker.py) is run by path and imports only the standard library and py_mini_racer; this
# package's other modules are never imported there.

from .errors import SandboxError
from .pool import SandboxPool, run_budget, sandbox_pool
from .scheduling import RunBudget

__all__ = ["RunBudget", "SandboxError", "SandboxPool", "run_budget", "sandbox_pool"]
