"""The server: the ASGI wrapper and its limits, reused request threads, the orphan guard, and what the `serve` and
`recover` commands run (agentsite/management/commands/ holds the thin command files Django finds). Imported by
the project shell only; it imports the kernel and nothing of the apps (tests/foundation/test_architecture.py)."""
