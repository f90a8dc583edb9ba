"""`manage.py clock`: the command lives in the server layer (agentsite/server/clock.py)."""

from agentsite.server.clock import Command

__all__ = ["Command"]
