"""agentsite: a self-hosted AI agent server."""

__version__ = "1.0.0"
