"""Captured content is exactly the GenAI conventions' JSON: validated against the published schemas.

The schemas (tests/data/genai_semconv_v1.41.0/, vendored with their source) let any
object with a ``type`` through as a ``GenericPart``; so a part whose ``type`` is one
the conventions define is also validated against that part's own definition (a
``{"type": "text", "text": ...}`` part fails: the conventions want ``content``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.tracing_harness import span_dicts

import nbdurable as nd
from nbdurable import tracing

SCHEMAS = Path(__file__).resolve().parent / "data" / f"genai_semconv_v{tracing.SEMCONV_VERSION}"

ATTRIBUTE_SCHEMAS = {
    "gen_ai.input.messages": "gen-ai-input-messages.json",
    "gen_ai.output.messages": "gen-ai-output-messages.json",
    "gen_ai.system_instructions": "gen-ai-system-instructions.json",
    "gen_ai.tool.definitions": "gen-ai-tool-definitions.json",
}

PART_DEFINITIONS = {
    "text": "TextPart",
    "tool_call": "ToolCallRequestPart",
    "tool_call_response": "ToolCallResponsePart",
    "blob": "BlobPart",
    "uri": "UriPart",
    "file": "FilePart",
    "reasoning": "ReasoningPart",
}

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / name).read_text())
    return loaded


def of(whole: dict[str, Any], definition: str) -> dict[str, Any]:
    """One definition of a schema, as a schema of its own."""
    return {"$defs": whole["$defs"], "$ref": f"#/$defs/{definition}"}


def validate(attribute: str, text: str) -> Any:
    """Validate one attribute's JSON text; every known part also against its own definition."""
    import jsonschema  # here: importing it costs every collecting process a second of CPU

    value = json.loads(text)
    whole = schema(ATTRIBUTE_SCHEMAS[attribute])
    jsonschema.validate(value, whole)
    items = value if attribute != "gen_ai.system_instructions" else [{"parts": value}]
    for message in items:
        for found in message.get("parts", []):
            definition = PART_DEFINITIONS.get(found["type"])
            if definition is not None:
                jsonschema.validate(found, of(whole, definition))
    if attribute == "gen_ai.tool.definitions":
        for tool in value:
            jsonschema.validate(tool, of(whole, "FunctionToolDefinition"))
    return value


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    nd.instrument(provider, capture_content=True)
    try:
        yield exporter
    finally:
        tracing.uninstrument()


@nd.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def test_the_strict_check_refuses_nbdurables_old_dump() -> None:
    import jsonschema

    old = [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]
    with pytest.raises(jsonschema.ValidationError):
        validate("gen_ai.input.messages", json.dumps(old))


async def test_chat_and_agent_spans_carry_the_conventions_json(
    exporter: InMemorySpanExporter,
) -> None:
    model = nd.ScriptedModel([nd.Turn.call("add", a=1, b=2), "It is 3."])
    question = nd.Message(
        role="user",
        content=[
            nd.TextPart(text="What is 1+2? See the picture."),
            nd.ImagePart(data=PNG, media_type="image/png"),
            nd.ImagePart(url="https://example.com/sum.png"),
        ],
    )
    await nd.generate_text(
        model=model,
        messages=[question],
        tools=[add],
        instructions="Use the tool.",
        session=nd.DurableSession(nd.open_store("memory://")),
    )
    spans = span_dicts(exporter.get_finished_spans())
    checked = 0
    for span in spans:
        for attribute in ATTRIBUTE_SCHEMAS:
            if attribute in span["attributes"]:
                validate(attribute, span["attributes"][attribute])
                checked += 1
    assert checked == 9  # 2 chats x 4 attributes, and the agent's output

    first, second = (s["attributes"] for s in spans if s["name"] == "chat scripted")
    [agent] = (s["attributes"] for s in spans if s["name"] == "invoke_agent")
    assert json.loads(first["gen_ai.input.messages"]) == [
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "What is 1+2? See the picture."},
                {
                    "type": "blob",
                    "modality": "image",
                    "mime_type": "image/png",
                    "content": base64.b64encode(PNG).decode(),
                },
                {
                    "type": "uri",
                    "modality": "image",
                    "mime_type": None,
                    "uri": "https://example.com/sum.png",
                },
            ],
        }
    ]
    assert json.loads(first["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "Use the tool."}
    ]
    [definition] = json.loads(first["gen_ai.tool.definitions"])
    assert definition["type"] == "function"
    assert definition["name"] == "add"
    assert definition["description"] == "Add two numbers."
    assert set(definition["parameters"]["properties"]) == {"a", "b"}
    [call_turn] = json.loads(first["gen_ai.output.messages"])
    assert call_turn["role"] == "assistant"
    assert call_turn["finish_reason"] == "tool_call"
    [call] = call_turn["parts"]
    assert call["type"] == "tool_call"
    assert (call["name"], call["arguments"]) == ("add", {"a": 1, "b": 2})
    history = json.loads(second["gen_ai.input.messages"])
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    assert history[2]["parts"] == [{"type": "tool_call_response", "id": call["id"], "response": 3}]
    answer = [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "It is 3."}],
            "finish_reason": "stop",
        }
    ]
    assert json.loads(second["gen_ai.output.messages"]) == answer
    assert json.loads(agent["gen_ai.output.messages"]) == answer
