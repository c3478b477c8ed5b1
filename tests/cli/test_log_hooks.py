"""What would bypass logging goes through the CLI's one handler: JSON lines, secrets masked."""

from __future__ import annotations

import gc
import json
import logging
import threading
import warnings

import pytest

from nbdurable.cli._logs import announce, configure_logging, report_error, reset_logging


class _Noisy:
    def __del__(self) -> None:
        raise RuntimeError("Event loop is closed")


def test_uncaught_ignored_and_warned_errors_are_json_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", "json")
    try:
        thread = threading.Thread(target=lambda: 1 / 0, name="doomed")
        thread.start()
        thread.join()
        _Noisy()
        gc.collect()
        warnings.warn("a library's warning", DeprecationWarning, stacklevel=1)
        logging.getLogger("psycopg.pool").warning("error connecting in 'pool'")
        logging.getLogger("psycopg.pool").info("below warning: not written")
        logging.getLogger("nbdurable.runs").info("GET /approve/r/a?token=v1.secret-token")
        announce("nbdurable serve: http://127.0.0.1:1 serving", url="http://127.0.0.1:1")
        report_error("nbdurable: the store stayed unavailable")
    finally:
        reset_logging()
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in (out + err).splitlines()]
    by_message = {line["message"]: line for line in lines}
    assert "uncaught exception in thread doomed" in by_message
    assert "ZeroDivisionError" in by_message["uncaught exception in thread doomed"]["exception"]
    assert any("_Noisy" in message for message in by_message), lines
    assert any(line["logger"] == "py.warnings" for line in lines), lines
    assert "error connecting in 'pool'" in by_message
    assert "below warning: not written" not in by_message
    assert "GET /approve/r/a?token=[redacted]" in by_message
    assert by_message["nbdurable serve: http://127.0.0.1:1 serving"]["url"] == "http://127.0.0.1:1"
    assert by_message["nbdurable: the store stayed unavailable"]["level"] == "error"
    assert "secret-token" not in out + err


def test_reset_logging_puts_everything_back() -> None:
    import sys

    hooks = (sys.excepthook, threading.excepthook, sys.unraisablehook)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging("debug", "text")
    assert sys.excepthook is not hooks[0]
    reset_logging()
    assert (sys.excepthook, threading.excepthook, sys.unraisablehook) == hooks
    assert root.handlers == handlers and root.level == level
