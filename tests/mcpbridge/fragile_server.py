"""A tiny stdio MCP server for tests: `echo` answers, `crash` exits the process in the middle of the call, `env`
answers the value of one of its environment variables (what a server given an admin's API key can leak).

Run as a script (`python fragile_server.py`); `--fail-at-start` exits before the handshake with a message on
stderr, like a server missing its API key; `--with-child` starts a long-lived child process first (as servers
started through npx or a shell do), whose command line ends in `fragile-child`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(name="echo", description="Answer with the given text.",
               input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    types.Tool(name="crash", description="Exit the server process during the call.",
               input_schema={"type": "object", "properties": {}}),
    types.Tool(name="env", description="Answer with the value of one of the server's environment variables.",
               input_schema={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
]


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "crash":
        sys.stderr.write("fragile: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(7)  # no reply, no clean shutdown: what a segfault or an OOM kill looks like to the client
    if params.name == "env":
        name = (params.arguments or {}).get("name", "")
        return types.CallToolResult(content=[types.TextContent(text=f"{name}={os.environ.get(name, '')}")])
    text = (params.arguments or {}).get("text", "")
    return types.CallToolResult(content=[types.TextContent(text=f"echo: {text}")])


def main() -> None:
    if "--fail-at-start" in sys.argv:
        sys.stderr.write("fragile: FRAGILE_TOKEN is not set\n")
        sys.exit(2)
    if "--with-child" in sys.argv:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "fragile-child"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    server = Server("fragile", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
