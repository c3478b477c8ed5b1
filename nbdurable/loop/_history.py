"""Reading and extending a run's history: trailing calls, approval parts, the model's view."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from ..messages import (
    ApprovalRequestPart,
    Message,
    Part,
    TextPart,
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
    "human_note",
    "trailing_calls",
    "with_approval_parts",
    "with_human_answers",
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


def with_human_answers(
    assistant: Message,
    answers: Mapping[str, tuple[ToolApprovalRequest, ToolApprovalResponse]],
) -> Message:
    """The assistant message showing what a human made of its calls.

    A call run with edited arguments shows them (the call that ran; the
    model's own stay in its approval part's ``request.input``), and each such
    call, or one answered in place of the tool, has its approval part with the
    verdict (appended when the call had none: a server-mode approver's).

    Args:
        assistant: The message that made the calls.
        answers: The request and verdict of each such call, by call id.
    """
    if not answers:
        return assistant
    content: list[Part] = []
    recorded: set[str] = set()
    for part in assistant.content:
        if isinstance(part, ToolCallPart) and part.tool_call_id in answers:
            edited = answers[part.tool_call_id][1].arguments
            if edited is not None:
                part = part.model_copy(update={"args": dict(edited)})
        elif isinstance(part, ApprovalRequestPart) and part.request.tool_call_id in answers:
            recorded.add(part.request.tool_call_id)
            if part.verdict is None:
                part = part.model_copy(update={"verdict": answers[part.request.tool_call_id][1]})
        content.append(part)
    for call_id, (request, verdict) in answers.items():
        if call_id not in recorded:
            content.append(ApprovalRequestPart(request=request, verdict=verdict))
    return assistant.model_copy(update={"content": tuple(content)})


def human_note(request: ToolApprovalRequest, verdict: ToolApprovalResponse) -> str | None:
    """What the model is told of a human's edit of, or answer to, one of its calls (None: nothing).

    The history shows the call that ran; this says a human changed it (and
    from what), so the model is not confused by arguments it did not write.
    """
    if verdict.arguments is not None:
        original = json.dumps(request.input, ensure_ascii=False, sort_keys=True)
        return (
            f"[A human reviewer edited the arguments of the {request.tool_name} call "
            f"{request.tool_call_id} before approving it: it ran with the arguments shown; "
            f"the arguments first proposed were {original}.]"
        )
    if verdict.reply is not None:
        return (
            f"[A human reviewer answered the {request.tool_name} call {request.tool_call_id} "
            "in place of the tool: the tool did not run, its result is the reviewer's reply.]"
        )
    return None


def model_view(messages: Sequence[Message]) -> Sequence[Message]:
    """Messages as a model sees them: approval bookkeeping parts left out.

    A call a human edited or answered keeps a short note in their place (a
    text part before the message's calls, see :func:`human_note`). ``messages``
    itself when there are no approval parts.
    """
    if not any(isinstance(p, ApprovalRequestPart) for m in messages for p in m.content):
        return messages
    view = []
    for message in messages:
        if any(isinstance(p, ApprovalRequestPart) for p in message.content):
            message = message.model_copy(update={"content": _seen_by_model(message.content)})
        view.append(message)
    return tuple(view)


def _seen_by_model(content: Sequence[Part]) -> tuple[Part, ...]:
    notes: list[Part] = []
    for part in content:
        if isinstance(part, ApprovalRequestPart) and part.verdict is not None:
            note = human_note(part.request, part.verdict)
            if note is not None:
                notes.append(TextPart(text=note))
    kept: list[Part] = [p for p in content if not isinstance(p, ApprovalRequestPart)]
    if notes:
        at = next((i for i, p in enumerate(kept) if isinstance(p, ToolCallPart)), len(kept))
        kept[at:at] = notes
    return tuple(kept)


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
