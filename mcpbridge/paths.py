"""The paths the MCP server side answers on: streamable HTTP at /mcp, the legacy SSE transport beside it."""

from oauth.resource import MCP_PATH  # the resource the authorization server issues tokens for

__all__ = ["MCP_PATH", "MESSAGES_PATH", "SSE_PATH"]
SSE_PATH = MCP_PATH + "/sse"
MESSAGES_PATH = MCP_PATH + "/messages/"
