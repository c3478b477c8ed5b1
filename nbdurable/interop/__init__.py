"""Tools from other frameworks as nbdurable tools (each framework imported only when used).

- :func:`~nbdurable.interop._langchain_tools.from_langchain` (``Tool.from_langchain``):
  a LangChain ``BaseTool``; needs ``langchain-core``.
- :func:`~nbdurable.interop._pydantic_ai_tools.from_pydantic_ai`
  (``Tool.from_pydantic_ai``): a Pydantic AI tool; needs ``pydantic-ai-slim``.
- MCP servers' tools: :mod:`nbdurable.mcp`.
"""
