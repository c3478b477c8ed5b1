"""An MCP ``CallToolResult`` as an nbdurable tool result, or the error the model reads."""

from __future__ import annotations

from typing import Any

__all__ = ["MCPToolError", "result_value"]


class MCPToolError(Exception):
    """An MCP tool reported an error (``isError``); the message is what the model reads."""


def result_value(result: Any) -> Any:
    """The JSON-able value of a tool result: structured content, else the text, else the blocks.

    Raises:
        MCPToolError: The result is an error; its message is the result's text.
    """
    blocks = list(result.content or [])
    if result.is_error:
        text = "\n".join(b.text for b in blocks if getattr(b, "type", None) == "text")
        raise MCPToolError(text or "the MCP tool reported an error without a message")
    if result.structured_content is not None:
        return result.structured_content
    if not blocks:
        return ""
    if len(blocks) == 1 and blocks[0].type == "text":
        return blocks[0].text
    return [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in blocks]
