"""``--log-level`` and ``--log-format text|json`` of ``nbdurable worker`` and ``serve``.

:func:`configure_logging` gives the process one log handler, on the root logger,
so every line the process writes to stderr has the chosen format: the
``nbdurable`` loggers' (at ``--log-level``), uvicorn's, and other libraries'
(psycopg's pool, asyncio's reports of failed tasks, warnings) at ``warning`` and
above, or at ``--log-level`` when that is more severe. What would bypass logging
goes through it too: an exception no one catches (in the main thread or
another), an exception Python can only ignore (``Exception ignored in ...``),
and a warning. Every record is masked by :class:`nbdurable._redact.RedactSecrets`
first (approval links' tokens, bearer tokens, URL passwords). The lines a
command announces on stdout (its URL, its start) go through :func:`announce`:
JSON objects too with ``--log-format json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TextIO

from .._redact import RedactSecrets, redact

__all__ = [
    "FIELDS",
    "LEVELS",
    "JsonFormatter",
    "TextFormatter",
    "add_log_options",
    "announce",
    "configure_logging",
    "report_error",
    "reset_logging",
]

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
    "url",
)
"""Record attributes a JSON line carries when a log call sets them."""

LEVELS = ("debug", "info", "warning", "error", "critical")
"""The values of ``--log-level`` (any case: ``INFO`` is ``info``)."""

HANDLER_NAME = "nbdurable-cli"
CLI_LOGGER = "nbdurable.cli"
"""The logger of the command's own lines (announcements, its final error)."""


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
        if record.exc_info or record.exc_text:
            # exc_text: the traceback as RedactSecrets masked it (formatted once)
            line["exception"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        if record.stack_info:
            line["stack"] = record.stack_info
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


def _lowered(text: str) -> str:
    """An option's value in lower case (``INFO``, ``Info`` and ``info`` are one level)."""
    return text.strip().lower()


def add_log_options(parser: Any, *, level: str = "info") -> None:
    """Add ``--log-level`` and ``--log-format`` to a subcommand's parser."""
    parser.add_argument(
        "--log-level",
        default=level,
        type=_lowered,
        choices=list(LEVELS),
        help=f"least severe level of the nbdurable log lines written to stderr, in any "
        f"case (default {level}; other libraries' from warning up)",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        type=_lowered,
        choices=["text", "json"],
        help="text lines, or one JSON object per line, stdout's announcements and every "
        "library's lines included (default text)",
    )


@dataclass
class _Installed:
    """What :func:`configure_logging` changed, to put back in :func:`reset_logging`."""

    handler: logging.Handler
    root_level: int
    levels: dict[str, tuple[int, bool]]
    excepthook: Any
    threading_excepthook: Any
    unraisablehook: Any


_INSTALLED: list[_Installed] = []


def configure_logging(
    level: str = "info", log_format: str = "text", also: tuple[str, ...] = ()
) -> logging.Handler:
    """Write every log record of the process to stderr in ``log_format``, secrets masked.

    The ``nbdurable`` loggers (and ``also``'s) log at ``level``; other loggers at
    ``warning`` and above (or ``level`` when more severe). Uncaught exceptions,
    ignored ones and warnings are logged too.

    Returns:
        The handler installed on the root logger (replacing one an earlier call installed).
    """
    reset_logging()
    levelno = logging.getLevelName(_lowered(level).upper())
    if not isinstance(levelno, int):
        raise ValueError(f"unknown log level {level!r}: one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(RedactSecrets())
    handler.set_name(HANDLER_NAME)
    root = logging.getLogger()
    installed = _Installed(
        handler=handler,
        root_level=root.level,
        levels={},
        excepthook=sys.excepthook,
        threading_excepthook=threading.excepthook,
        unraisablehook=sys.unraisablehook,
    )
    root.addHandler(handler)
    root.setLevel(max(levelno, logging.WARNING))
    for name in ("nbdurable", *also):
        logger = logging.getLogger(name)
        installed.levels[name] = (logger.level, logger.propagate)
        logger.setLevel(levelno)
        logger.propagate = True  # to the one handler: nothing is written twice
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
    sys.unraisablehook = _log_unraisable
    _INSTALLED.append(installed)
    return handler


def reset_logging() -> None:
    """Undo :func:`configure_logging` (tests calling the CLI in process use it)."""
    while _INSTALLED:
        installed = _INSTALLED.pop()
        root = logging.getLogger()
        root.removeHandler(installed.handler)
        root.setLevel(installed.root_level)
        for name, (level, propagate) in installed.levels.items():
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.propagate = propagate
        logging.captureWarnings(False)
        sys.excepthook = installed.excepthook
        threading.excepthook = installed.threading_excepthook
        sys.unraisablehook = installed.unraisablehook


def _log_uncaught(
    kind: type[BaseException], error: BaseException, traceback: TracebackType | None
) -> None:
    logging.getLogger(CLI_LOGGER).critical(
        "uncaught exception: %s", type(error).__name__, exc_info=(kind, error, traceback)
    )


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return  # as threading's own hook: a thread that exits says nothing
    name = args.thread.name if args.thread is not None else "?"
    error = args.exc_value if args.exc_value is not None else args.exc_type()
    logging.getLogger(CLI_LOGGER).error(
        "uncaught exception in thread %s", name, exc_info=(args.exc_type, error, args.exc_traceback)
    )


def _log_unraisable(unraisable: Any) -> None:
    message = unraisable.err_msg or "Exception ignored in"
    error = unraisable.exc_value
    try:
        logging.getLogger(CLI_LOGGER).error(
            "%s: %r",
            message,
            unraisable.object,
            exc_info=(unraisable.exc_type, error, unraisable.exc_traceback) if error else None,
        )
    except Exception:  # the interpreter is going away: one plain line of what was lost
        text = f"{message}: {error!r}"
        line = {"level": "error", "logger": CLI_LOGGER, "message": text}
        with contextlib.suppress(Exception):
            sys.stderr.write((json.dumps(line, default=str) if _json() else text) + "\n")


def _json_line(message: str, level: int, fields: dict[str, Any]) -> str:
    record = logging.LogRecord(CLI_LOGGER, level, __file__, 0, message, (), None)
    record.created = time.time()
    for name, value in fields.items():
        setattr(record, name, value)
    return JsonFormatter().format(record)


def _json() -> bool:
    return bool(_INSTALLED) and isinstance(_INSTALLED[-1].handler.formatter, JsonFormatter)


def announce(message: str, *, stream: TextIO | None = None, **fields: Any) -> None:
    """Write a line a command announces (on stdout unless ``stream``), secrets masked.

    With ``--log-format json`` it is a JSON object like a log line's (logger
    ``nbdurable.cli``, level ``info``, ``message`` the text line, and ``fields``).
    """
    out = stream if stream is not None else sys.stdout
    message = redact(message)
    line = _json_line(message, logging.INFO, fields) if _json() else message
    print(line, file=out, flush=True)


def report_error(message: str) -> None:
    """Write the command's last line, its error, to stderr (a JSON object in JSON mode)."""
    message = redact(message)
    line = _json_line(message, logging.ERROR, {}) if _json() else message
    print(line, file=sys.stderr, flush=True)
