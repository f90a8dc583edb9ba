"""The kernel: the helpers every layer shares (errors, validation, JSON bodies, pagination, SSE framing, database
calls, processes, the task queue, invalidation, env readers, the data directory, hosts, CORS, start-up hooks, disk
space, ASGI mounts and the SQLite backend). It imports no app, nothing of the runtime and nothing of the project
shell (tests/foundation/test_architecture.py); its one model, ServiceProcess, stays in agentsite/models.py under
the `agentsite` app label so the migration history of existing data directories stays valid."""
