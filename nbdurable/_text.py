r"""Text every store, event and model can encode: the lone-surrogate policy.

Python strings may hold surrogate code points (U+D800..U+DFFF) that UTF-8 cannot
encode: ``os.listdir`` and subprocess output turn undecodable bytes into them
(``surrogateescape``: byte 0xFF becomes ``"\udcff"``), and ``json.loads``
makes them from ``"\udcff"`` escapes. The policy, applied wherever text enters
a message, a stream part, an event or a run record:

- a high surrogate followed by a low one becomes the character the pair encodes
  (as UTF-16 reads it), since that is what the text meant;
- every other surrogate becomes U+FFFD (the replacement character), one per surrogate.

Everything else is left as it is, and valid text or data is never copied.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import PydanticSerializationError, core_schema, to_json

__all__ = ["InPython", "valid_data", "valid_text"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with surrogate pairs joined and lone surrogates replaced by U+FFFD.

    Returns ``text`` itself when it has no surrogate (an ASCII string is
    answered without a scan).
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def valid_data(value: Any) -> Any:
    """``value`` (JSON-like data) with :func:`valid_text` applied to every string and key.

    Containers are copied only where something changed; anything that is not a
    string, dict, list or tuple is returned unchanged.
    """
    if isinstance(value, str):
        return valid_text(value)
    if not isinstance(value, (dict, list, tuple)):
        return value
    try:
        # The usual case, nothing to change, at the serializer's speed: it
        # refuses a surrogate anywhere, keys included.
        to_json(value, fallback=_anything, bytes_mode="base64")
    except (PydanticSerializationError, ValueError, RecursionError):
        return _walk(value, set())
    return value


def _anything(value: Any) -> None:
    return None


def _walk(value: Any, active: set[int]) -> Any:
    if isinstance(value, str):
        return valid_text(value)
    if not isinstance(value, (dict, list, tuple)) or id(value) in active:
        return value  # a cycle is left as it is: no store could encode it anyway
    active.add(id(value))
    try:
        if isinstance(value, dict):
            items = [
                (valid_text(k) if isinstance(k, str) else k, _walk(v, active))
                for k, v in value.items()
            ]
            same = zip(items, value.items(), strict=True)
            if all(k is old_k and v is old_v for (k, v), (old_k, old_v) in same):
                return value
            return dict(items)
        cleaned = [_walk(item, active) for item in value]
        if all(new is old for new, old in zip(cleaned, value, strict=True)):
            return value
        return cleaned if isinstance(value, list) else tuple(cleaned)
    finally:
        active.discard(id(value))


@dataclass(frozen=True)
class InPython:
    """A pydantic annotation: run ``func`` after validating Python input, not JSON.

    JSON input needs no check: the JSON parser refuses lone surrogates (and a
    store reads back only what it wrote), so loads pay nothing for the policy.
    """

    func: Callable[[Any], Any]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """The field's schema, with ``func`` after it for Python input."""
        schema = handler(source)
        return core_schema.json_or_python_schema(
            json_schema=schema,
            python_schema=core_schema.no_info_after_validator_function(self.func, schema),
        )
