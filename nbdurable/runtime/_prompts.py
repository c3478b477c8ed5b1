"""Prompts the runtime accepts: a nonblank string or a user message."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from .._errors import ConfigurationError
from .._text import valid_text
from ..messages import ApprovalRequestPart, ImagePart, Message, TextPart, ToolCallPart

__all__ = ["Prompt", "canonical_prompt", "prompt_message", "validate_prompt"]

Prompt = str | Message


def validate_prompt(prompt: Any) -> Prompt:
    """Check a prompt against the core contracts; media is never fetched or transformed.

    Accepted: a string that is not blank, or a user :class:`Message` with at least
    one part, where media-only messages are fine. A dict is read as a message.
    Lone surrogates in a string become U+FFFD, as in every message.

    Raises:
        ConfigurationError: A blank string, an empty message, a role other than
            ``user``, or parts a user message cannot hold.
    """
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ConfigurationError("the prompt must not be blank")
        return valid_text(prompt)
    if isinstance(prompt, dict):
        try:
            prompt = Message.model_validate(prompt)
        except ValidationError as exc:
            raise ConfigurationError(f"the prompt is not a valid message: {exc}") from None
    if not isinstance(prompt, Message):
        raise ConfigurationError(
            f"a prompt is a string or a user message, not {type(prompt).__name__}"
        )
    if prompt.role != "user":
        raise ConfigurationError(f"a prompt message must have role 'user', not {prompt.role!r}")
    if not prompt.content:
        raise ConfigurationError("the prompt message has no content")
    for part in prompt.content:
        if isinstance(part, (ToolCallPart, ApprovalRequestPart)) or not isinstance(
            part, (TextPart, ImagePart)
        ):
            raise ConfigurationError(f"a user prompt cannot hold a {part.type} part")
    if all(isinstance(p, TextPart) and not p.text.strip() for p in prompt.content):
        raise ConfigurationError("the prompt message holds only blank text")
    return prompt


def prompt_message(prompt: Prompt) -> Message:
    """The prompt as the user message that starts a run."""
    return prompt if isinstance(prompt, Message) else Message(role="user", content=prompt)


def canonical_prompt(prompt: Prompt) -> str:
    """Compact JSON with sorted keys: equivalent prompts give equal text.

    Inline media is base64 in it, so its length is the prompt's payload size.
    """
    data: Any = prompt if isinstance(prompt, str) else prompt.model_dump(mode="json")
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
