"""`manage.py recover` / `agentsite recover`: the command lives in the server layer (agentsite/server/recover.py)."""

from agentsite.server.recover import Command

__all__ = ["Command"]
