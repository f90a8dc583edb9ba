"""`manage.py serve` / `agentsite serve`: the command lives in the server layer (agentsite/server/serve.py)."""

from agentsite.server.serve import Command

__all__ = ["Command"]
