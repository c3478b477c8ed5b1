"""Reading and extending a run's history: trailing calls, approval parts, the model's view."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..messages import (
    ApprovalRequestPart,
    Message,
    Part,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCallPart,
    ToolResultPart,
    tool_message,
)

__all__ = [
    "final_text",
    "model_view",
    "recorded_requests",
    "tool_message_for",
    "trailing_calls",
    "with_approval_parts",
]


def trailing_calls(
    messages: Sequence[Message],
) -> tuple[int, tuple[ToolCallPart, ...]] | None:
    """The last assistant message's index and its calls that no following tool message answers."""
    answered: set[str] = set()
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "tool":
            answered.update(r.tool_call_id for r in message.tool_results)
            continue
        if message.role != "assistant":
            return None
        unresolved = tuple(c for c in message.tool_calls if c.tool_call_id not in answered)
        return (index, unresolved) if unresolved else None
    return None


def recorded_requests(
    assistant: Message,
) -> dict[str, tuple[ToolApprovalRequest, ToolApprovalResponse | None]]:
    """The approval requests recorded on ``assistant``, by call id, with their verdicts so far."""
    return {
        part.request.tool_call_id: (part.request, part.verdict)
        for part in assistant.content
        if isinstance(part, ApprovalRequestPart)
    }


def with_approval_parts(
    assistant: Message,
    verdicts: Mapping[str, ToolApprovalResponse],
    new_requests: Iterable[ToolApprovalRequest],
) -> Message:
    """The assistant message with its approval requests (and settled verdicts) recorded.

    Args:
        assistant: The message whose calls wait.
        verdicts: Verdicts given in this leg, by call id (recorded where none was yet).
        new_requests: Requests made in this leg, appended as approval parts.
    """
    content: list[Part] = []
    for part in assistant.content:
        if isinstance(part, ApprovalRequestPart):
            verdict = verdicts.get(part.request.tool_call_id)
            if verdict is not None and part.verdict is None:
                part = part.model_copy(update={"verdict": verdict})
        content.append(part)
    content.extend(ApprovalRequestPart(request=r) for r in new_requests)
    return assistant.model_copy(update={"content": tuple(content)})


def model_view(messages: Sequence[Message]) -> Sequence[Message]:
    """Messages as a model sees them: approval bookkeeping parts left out.

    ``messages`` itself when there are none.
    """
    if not any(isinstance(p, ApprovalRequestPart) for m in messages for p in m.content):
        return messages
    view = []
    for message in messages:
        if any(isinstance(p, ApprovalRequestPart) for p in message.content):
            kept = tuple(p for p in message.content if not isinstance(p, ApprovalRequestPart))
            message = message.model_copy(update={"content": kept})
        view.append(message)
    return tuple(view)


def tool_message_for(
    calls: tuple[ToolCallPart, ...], results: Mapping[str, ToolResultPart]
) -> Message:
    """The tool message answering ``calls``, in their order (calls without a result left out)."""
    return tool_message([results[c.tool_call_id] for c in calls if c.tool_call_id in results])


def final_text(messages: Sequence[Message]) -> str:
    """The text of the last assistant message ("" when there is none)."""
    for message in reversed(messages):
        if message.role == "assistant":
            return message.text
    return ""
