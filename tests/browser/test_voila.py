"""The run widget of a finished run rendered by Voilà, in a real (headless) Chromium.

Screenshot ``voila-run-widget.png``. Skipped when Voilà is missing.
"""

from __future__ import annotations

from typing import Any

import pytest

from .harness import Server
from .pages import diagnosed, shot


def test_the_run_widget_renders_in_voila(page: Any, voila_server: Server | None) -> None:
    if voila_server is None:
        pytest.skip("Voilà is missing (pip install --group dev -e .)")
    server = voila_server.ready()
    with diagnosed(page, server, "voila"):
        page.goto(server.url("/"), timeout=60_000)
        widget = page.locator(".nbd-run").first
        widget.wait_for(timeout=60_000)
        server.note_kernels()
        page.wait_for_selector(".nbd-run .nbd-badge.nbd-status-completed")
        texts = widget.locator(".nbd-step .nbd-text").all_inner_texts()
        assert texts[-1] == "sales has 42 rows.", texts
        assert 'count_rows(table="sales")' in widget.locator(".nbd-tool-summary").inner_text()
        assert widget.locator(".nbd-summary").text_content() == "completed"
        shot(page, "voila-run-widget.png")
        page.locator(".nbd-run[data-kernel='live']").wait_for()  # the kernel answered
        assert not widget.locator(".nbd-live").is_visible()
