"""Tool results and tools to and from MCP's wire types (content blocks camelCased as on the wire)."""

from __future__ import annotations

import json

import mcp_types as types
from pydantic import TypeAdapter, ValidationError

from agentsite.agent.tools import Tool, ToolResult

_CONTENT_BLOCK: TypeAdapter[types.ContentBlock] = TypeAdapter(types.ContentBlock)


def result_from_mcp(result: types.CallToolResult) -> ToolResult:
    """An MCP result as the runtime's ToolResult (MCP-shaped dicts, camelCase keys as on the wire)."""
    blocks = [block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in result.content]
    if not blocks and result.structured_content is not None:
        blocks = [{"type": "text", "text": json.dumps(result.structured_content, ensure_ascii=False)}]
    return ToolResult(blocks, bool(result.is_error))


def result_to_mcp(result: ToolResult) -> types.CallToolResult:
    """The runtime's ToolResult as an MCP result; a block MCP does not know becomes its JSON as text."""
    blocks: list[types.ContentBlock] = []
    for block in result.content:
        try:
            blocks.append(_CONTENT_BLOCK.validate_python(block, by_alias=True))
        except ValidationError:
            blocks.append(types.TextContent(text=json.dumps(block, ensure_ascii=False, default=str)))
    return types.CallToolResult(content=blocks, is_error=result.is_error)


def tool_to_mcp(tool: Tool) -> types.Tool:
    schema = tool.input_schema if tool.input_schema.get("type") == "object" else {"type": "object"}
    return types.Tool(name=tool.name, description=tool.description, input_schema=schema)
