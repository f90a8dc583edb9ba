"""The paths the MCP server side answers on: streamable HTTP at /mcp, the legacy SSE transport beside it."""

MCP_PATH = "/mcp"
SSE_PATH = MCP_PATH + "/sse"
MESSAGES_PATH = MCP_PATH + "/messages/"
