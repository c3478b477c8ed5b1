"""Secrets kept out of log lines: query tokens, bearer credentials and URL passwords.

An approval link carries its signed token in its query (``/approve/...?token=...``),
so an access log line that shows the request's path would hand the link to anyone
who reads the log. :class:`RedactSecrets` is a :class:`logging.Filter` that masks,
in a record's message, its arguments, its exception's traceback and its stack:

- the value of a query parameter whose name says it is a credential (``token``,
  ``access_token``, ``api_key``, ``secret``, ``password``, ``sig``, ...);
- the credential after ``Bearer``;
- the password of a URL (``postgresql://user:PASSWORD@host/db``) and a libpq
  ``password=...`` setting.

Put it on a handler to cover every record the handler writes (the CLI does, on its
one handler of the root logger), or on a logger for the records logged to that
logger by name (the bridge does, on ``uvicorn.access`` and ``uvicorn.error``, so
uvicorn's own handlers write masked lines too).
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = ["MASK", "RedactSecrets", "redact", "redact_record"]

MASK = "[redacted]"
"""What a masked secret reads as."""

_NAMES = (
    r"[\w.-]*token|[\w.-]*secret|api[_-]?key|apikey|key|password|passwd|pwd|sig|signature"
    r"|auth|authorization|credentials?|code"
)
_PATTERNS: tuple[re.Pattern[str], ...] = (
    # ?token=... &api_key=... (the value ends at the next parameter, fragment or blank)
    re.compile(rf"(?i)([?&;](?:{_NAMES})=)[^&#\s\"'<>]+"),
    # Authorization: Bearer ...
    re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    # scheme://user:password@host (the password, up to the @)
    re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@\"'<>]*:)[^/\s@\"'<>]+(?=@)"),
    # libpq's key=value connection strings: password=... or password='...'
    re.compile(r"(?i)\b(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s'\"&]+)"),
)
"""Each keeps its group 1 and masks the rest of its match."""


def _mask(found: re.Match[str]) -> str:
    # A function, not a template such as r"\g<1>": re compiles templates by
    # importing, which fails while the interpreter shuts down, and lines are
    # logged then too (an exception ignored during teardown).
    return found.group(1) + MASK


def redact(text: str) -> str:
    """``text`` with every secret it shows masked (the same object when it shows none)."""
    for pattern in _PATTERNS:
        text = pattern.sub(_mask, text)
    return text


def _redact_value(value: Any) -> Any:
    """An argument of a log call, masked.

    Text as text; another object by its ``str`` only when that shows a secret
    (so numbers and the like keep their type for the formatters that read them,
    as uvicorn's access formatter does).
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    try:
        shown = str(value)
    except Exception:  # an object whose __str__ fails shows nothing
        return value
    masked = redact(shown)
    return value if masked == shown else masked


_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
"""A log record's own attributes: anything else came through ``extra=``."""


def redact_record(record: logging.LogRecord) -> None:
    """Mask the secrets of ``record`` in place: message, args, extra fields, exception, stack."""
    for key, value in list(vars(record).items()):
        if key not in _STANDARD and isinstance(value, str):  # extra={...}: JSON lines show them
            setattr(record, key, redact(value))
    if record.args:
        if isinstance(record.args, dict):
            record.args = {key: _redact_value(value) for key, value in record.args.items()}
        else:
            record.args = tuple(_redact_value(value) for value in record.args)
        try:
            shown = record.getMessage()
        except Exception:  # a malformed call: the handler reports it as logging does
            shown = None
        if shown is not None and redact(shown) != shown:  # a secret across msg and args
            record.msg, record.args = redact(shown), ()
    elif isinstance(record.msg, str):
        record.msg = redact(record.msg)
    elif record.msg is not None:
        record.msg = _redact_value(record.msg)
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        # Formatters reuse exc_text once it is set: the traceback is formatted
        # (and masked) here once, for every handler.
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
    elif record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


class RedactSecrets(logging.Filter):
    """A filter that masks the secrets of every record it sees (and drops none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask ``record``'s secrets; always keep it."""
        redact_record(record)
        return True
