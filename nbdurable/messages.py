"""Messages, their parts, approval requests and token usage (pydantic v2 models).

All models are frozen and hold tuples, so a history once built cannot change under
a checkpoint that refers to it. Binary image data stays ``bytes`` in Python and is
base64 in JSON, so a JSON round trip gives real bytes back.

Every string a message holds (text, ids, tool arguments and results, metadata)
is valid Unicode that UTF-8 can encode: lone surrogates, which Python makes of
undecodable bytes (``surrogateescape``), become U+FFFD when the part is built
(see :mod:`nbdurable._text`), so no store, event or model ever sees them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from ._text import InPython, valid_data, valid_text

__all__ = [
    "ApprovalRequestPart",
    "ResponseKind",
    "FrozenModel",
    "ImagePart",
    "Message",
    "Part",
    "Role",
    "TextPart",
    "ToolApprovalRequest",
    "ToolApprovalResponse",
    "ToolCallPart",
    "ToolResultPart",
    "Usage",
    "VerdictSource",
    "assistant",
    "from_openai",
    "system",
    "to_openai",
    "tool_message",
    "user",
    "without_none",
]

Role = Literal["system", "user", "assistant", "tool"]


Text = Annotated[str, InPython(valid_text)]
"""A string whose lone surrogates become U+FFFD (the policy of :mod:`nbdurable._text`)."""
JsonData = Annotated[Any, InPython(valid_data)]
"""JSON-like data whose strings (keys too) follow the same policy."""
JsonObject = Annotated[dict[str, Any], InPython(valid_data)]
"""A JSON object whose strings (keys too) follow the same policy."""


def without_none(data: Any, *keys: str) -> Any:
    """Serialized ``data`` without those of ``keys`` whose value is None.

    A field added later is left out while unset, so what was stored before it
    existed keeps its bytes (and hashes).
    """
    if isinstance(data, dict):
        for key in keys:
            if data.get(key) is None:
                data.pop(key, None)
    return data


class FrozenModel(BaseModel):
    """The base of the records the library stores or streams.

    Immutable, with no unknown field, and bytes as base64 in JSON.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64"
    )


class TextPart(FrozenModel):
    """Plain text."""

    type: Literal["text"] = "text"
    text: Text


class ImagePart(FrozenModel):
    """An image, either inline bytes or an external URL (exactly one of them).

    URL images stay references: nbdurable never fetches or transforms media.
    """

    type: Literal["image"] = "image"
    data: bytes | None = None
    url: Text | None = None
    media_type: Text | None = None

    @model_validator(mode="after")
    def _exactly_one_source(self) -> ImagePart:
        if (self.data is None) == (self.url is None):
            raise ValueError("an image part needs exactly one of `data` (bytes) or `url`")
        return self


class ToolCallPart(FrozenModel):
    """A tool call the model asked for."""

    type: Literal["tool_call"] = "tool_call"
    tool_call_id: Text
    tool_name: Text
    args: JsonObject = Field(default_factory=dict)


class ToolResultPart(FrozenModel):
    """The result of one tool call; ``is_error`` marks a failure the model should react to."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: Text
    tool_name: Text
    result: JsonData = None
    is_error: bool = False


class ToolApprovalRequest(FrozenModel):
    """A gated tool call waiting for a human verdict.

    Attributes:
        approval_id: Id of this approval; distinct from the tool call id.
        tool_call_id: The model-issued id of the gated call.
        tool_name: Name of the gated tool.
        input: The call's arguments, exactly as the model gave them.
        agent_path: Sub-agent names from the top-level run down to the agent
            that made the call; empty for the run's own calls.
        token: The signed approval token (``v1.<payload>.<mac>``) when the call
            had an approval signer; echo it back on the response.
        allow_edit: Whether the tool lets a human change the call's arguments
            before approving (``@tool(allow_edit=True)``); a front end offers
            an edit form only then.
        parameters: With ``allow_edit``: the tool's JSON schema of its
            arguments, for a front end to build the form from (None otherwise).

    ``allow_edit`` and ``parameters`` are not signed (the token binds the call
    as the model made it) and are left out of the serialized form while unset,
    so requests stored before they existed keep their bytes.
    """

    approval_id: Text
    tool_call_id: Text
    tool_name: Text
    input: JsonObject = Field(default_factory=dict)
    agent_path: tuple[Text, ...] = ()
    token: Text | None = None
    allow_edit: bool = False
    parameters: JsonObject | None = None

    @model_serializer(mode="wrap")
    def _without_unset_edit(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = without_none(handler(self), "parameters")
        if isinstance(data, dict) and data.get("allow_edit") is False:
            data.pop("allow_edit")
        return data


class VerdictSource(FrozenModel):
    """Who gave a verdict, and how.

    Attributes:
        by: The principal's name: authenticated (a named token of the HTTP
            bridge) only when ``authenticated``, otherwise the name the
            deciding process claimed (its OS user, or a name set for it).
            None for a verdict given through an approval link, which is a
            bearer credential and proves no identity.
        authenticated: True when ``by`` was authenticated.
        via: How it was given: ``widget``, ``magic``, ``cli``, ``http``,
            ``link``, ``api`` or ``grant``.
        addressed_to: For ``via="link"``: whom the link was addressed to.
        grant_id: For ``via="grant"``: the standing approval that covered the call.
        minted_by: For ``via="link"``: who minted the link (signed into its
            token): a named bridge token's principal (authenticated) when
            ``minted_via`` is ``http``, a claimed name for ``api``; None for
            the notifier, the unnamed token, or a link minted before links
            recorded it.
        minted_via: For ``via="link"``: how the link was minted: ``http``
            (the bridge's API), ``api`` (Python, a notebook) or ``notify`` (a
            notification addressed to an approver); None before links recorded it.
    """

    by: Text | None = None
    authenticated: bool = False
    via: Text | None = None
    addressed_to: Text | None = None
    grant_id: Text | None = None
    minted_by: Text | None = None
    minted_via: Text | None = None

    @model_serializer(mode="wrap")
    def _without_unminted(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(handler(self), "minted_by", "minted_via")


ResponseKind = Literal["approved", "edited", "denied", "replied"]
"""What a verdict does: runs the call as asked, runs it edited, refuses it, answers in its place."""


class ToolApprovalResponse(FrozenModel):
    """A verdict on one approval request.

    Four kinds: approve (``approved=True``), approve with edited arguments
    (``approved=True, arguments={...}``: the call runs with them), deny
    (``approved=False``: an is_error result with ``reason``) and reply
    (``approved=False, reply="..."``: the tool does not run, the call is
    settled with ``reply`` as its result, not an error).

    Attributes:
        approval_id: The request's ``approval_id``.
        approved: True to run the tool, False to deny it (or answer it, with ``reply``).
        reason: Why it was denied; shown to the model in the is_error result.
        token: The request's token, echoed back unchanged (needed to approve
            when the settling call has an approval signer; denials need none).
            It binds the call as the model made it, also when ``arguments``
            edit it.
        source: Who gave the verdict and how (None: not recorded).
        arguments: Edited arguments the call runs with instead of the model's
            (only with ``approved=True``; the tool must allow editing, and they
            are validated against its schema).
        reply: The human's answer in place of the tool (only with
            ``approved=False``): the call's result, not an error.

    Raises:
        pydantic.ValidationError: ``arguments`` without ``approved``, ``reply``
            with ``approved``, or both.
    """

    approval_id: Text
    approved: bool
    reason: Text | None = None
    token: Text | None = None
    source: VerdictSource | None = None
    arguments: JsonObject | None = None
    reply: Text | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ToolApprovalResponse:
        if self.arguments is not None and not self.approved:
            raise ValueError("edited `arguments` come only with approved=True")
        if self.reply is not None and self.approved:
            raise ValueError("a `reply` answers the call instead of running it: approved=False")
        return self

    @property
    def kind(self) -> ResponseKind:
        """What the verdict does: ``approved``, ``edited``, ``denied`` or ``replied``."""
        if self.approved:
            return "approved" if self.arguments is None else "edited"
        return "denied" if self.reply is None else "replied"

    @model_serializer(mode="wrap")
    def _without_unrecorded_source(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(handler(self), "source", "arguments", "reply")


class ApprovalRequestPart(FrozenModel):
    """Records, inside the assistant message, that one of its calls awaits approval.

    ``verdict`` is set when a resume settled the request but the step suspended
    again (a sub-agent in the same batch asked for more): the verified verdict
    then holds for the next leg, so the caller is not asked twice.
    """

    type: Literal["tool_approval_request"] = "tool_approval_request"
    request: ToolApprovalRequest
    verdict: ToolApprovalResponse | None = None


Part = Annotated[
    TextPart | ImagePart | ToolCallPart | ToolResultPart | ApprovalRequestPart,
    Field(discriminator="type"),
]


class Message(FrozenModel):
    """One message of a conversation.

    ``content`` accepts a plain string (one text part) or a sequence of parts.
    """

    role: Role
    content: tuple[Part, ...]
    metadata: JsonObject | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _coerce_content(cls, value: Any) -> Any:
        if isinstance(value, str):
            return (TextPart(text=value),)
        if isinstance(value, list):
            return tuple(value)
        return value

    @property
    def text(self) -> str:
        """The concatenated text of all text parts."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        """The tool call parts, in order."""
        return tuple(p for p in self.content if isinstance(p, ToolCallPart))

    @property
    def tool_results(self) -> tuple[ToolResultPart, ...]:
        """The tool result parts, in order."""
        return tuple(p for p in self.content if isinstance(p, ToolResultPart))

    @property
    def approval_requests(self) -> tuple[ToolApprovalRequest, ...]:
        """Approval requests recorded on this (assistant) message."""
        return tuple(p.request for p in self.content if isinstance(p, ApprovalRequestPart))


class Usage(FrozenModel):
    """Token usage, and cost in US dollars when known. Adding two usages sums them."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_input_tokens: int | None = None
    cost: float | None = None

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_input_tokens=_sum_optional(self.cached_input_tokens, other.cached_input_tokens),
            cost=_sum_optional(self.cost, other.cost),
        )


def _sum_optional(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _parts(content: str | bytes | Part | Iterable[str | bytes | Part]) -> tuple[Part, ...]:
    # pydantic models are iterable (over their fields): treat a single part as one item
    items: Iterable[Any] = (
        [content] if isinstance(content, (str, bytes, BaseModel)) else list(content)
    )
    parts: list[Part] = []
    for item in items:
        if isinstance(item, str):
            parts.append(TextPart(text=item))
        elif isinstance(item, bytes):
            parts.append(ImagePart(data=item))
        else:
            parts.append(item)
    return tuple(parts)


def user(
    content: str | bytes | Part | Iterable[str | bytes | Part],
    *,
    metadata: dict[str, Any] | None = None,
) -> Message:
    """Build a user message. Strings become text parts, bytes become image parts."""
    return Message(role="user", content=_parts(content), metadata=metadata)


def system(text: str) -> Message:
    """Build a system message."""
    return Message(role="system", content=(TextPart(text=text),))


def assistant(content: str | Part | Iterable[str | Part]) -> Message:
    """Build an assistant message (text and/or tool call parts)."""
    return Message(role="assistant", content=_parts(content))


def tool_message(results: Sequence[ToolResultPart]) -> Message:
    """Build the tool message that answers an assistant message's tool calls."""
    return Message(role="tool", content=tuple(results))


def to_openai(messages: Message | Iterable[Message]) -> list[dict[str, Any]]:
    """Messages as OpenAI Chat Completions message dicts (for evals, fine-tuning, other tools).

    Text, images (bytes as ``data:`` URLs), tool calls and tool results (one
    ``tool`` message each; ``is_error`` ones read ``"Error: ..."``) and system
    messages; approval records and metadata are left out, but a message read by
    :func:`from_openai` and unchanged since is written as it was read. See
    :func:`nbdurable._openai_chat.to_openai` for the details.

    Raises:
        ConfigurationError: An image outside a user message.
    """
    from ._openai_chat import to_openai as convert

    return convert(messages)


def from_openai(messages: Iterable[Mapping[str, Any] | BaseModel]) -> list[Message]:
    """OpenAI Chat Completions messages as messages (to seed a run from elsewhere).

    Dicts or the openai SDK's objects: ``system``/``developer``, ``user`` (text and
    ``image_url`` parts; ``data:`` URLs become bytes), ``assistant`` (text, a
    ``refusal``, ``tool_calls``) and ``tool`` messages (consecutive ones grouped,
    names taken from the calls they answer). What else they hold is kept in the
    metadata, so :func:`to_openai` writes them back exactly. See
    :func:`nbdurable._openai_chat.from_openai` for the details.

    Raises:
        ConfigurationError: Audio or file parts, the legacy function-calling
            format, custom tool calls, an unknown role, or a tool result for a
            call never made.
    """
    from ._openai_chat import from_openai as convert

    return convert(messages)
