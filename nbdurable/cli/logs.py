"""``--log-level`` and ``--log-format text|json`` of ``nbdurable worker`` and ``serve``."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

__all__ = ["FIELDS", "JsonFormatter", "TextFormatter", "add_log_options", "configure_logging"]

FIELDS = (
    "run_id",
    "agent",
    "trace_id",
    "event",
    "state",
    "reason",
    "verdict",
    "cause",
    "previous_owner",
)
"""Record attributes a JSON line carries when a log call sets them."""


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the run's fields."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line."""
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message``, then ``trace_id=...`` when the record carries one.

    A run's lifecycle lines name the run and agent in their message; the trace id
    (set when the run has a trace context) is appended so a text log can be
    joined to the run's trace without switching to ``--log-format json``.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as one text line (and its exception's traceback, if any)."""
        line = super().format(record)
        trace_id = getattr(record, "trace_id", None)
        if trace_id is None:
            return line
        head, newline, rest = line.partition("\n")
        return f"{head} trace_id={trace_id}{newline}{rest}"


def add_log_options(parser: Any, *, level: str = "info") -> None:
    """Add ``--log-level`` and ``--log-format`` to a subcommand's parser."""
    parser.add_argument(
        "--log-level",
        default=level,
        choices=["debug", "info", "warning", "error", "critical"],
        help=f"least severe log level written to stderr (default {level})",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="text lines, or one JSON object per line (default text)",
    )


def configure_logging(
    level: str = "info", log_format: str = "text", also: tuple[str, ...] = ()
) -> logging.Handler:
    """Send the ``nbdurable`` loggers' records (and ``also``'s) at ``level`` and above to stderr.

    Returns:
        The handler installed (replacing one an earlier call installed).
    """
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    handler.set_name("nbdurable-cli")
    for name in ("nbdurable", *also):
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            if old.get_name() == "nbdurable-cli":
                logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(level.upper())
        logger.propagate = False
    return handler
