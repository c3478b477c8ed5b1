"""What a widget's output says without a kernel: static text and HTML summaries.

A notebook saved with widget outputs and reopened where no kernel (or no widget
state) renders them, on GitHub, nbviewer or a fresh JupyterLab, shows an output's
``text/html`` or ``text/plain`` instead. ipywidgets writes the widget's ``repr``
there (``<...RunWidget object at 0x...>``); these summaries say what the run did.

A widget displays itself with a ``display_id`` (:class:`FallbackDisplay`) and
updates that output in place when the run pauses or ends, so the saved output
holds the run's latest state, not the state at the moment the cell ran. An update
by display id never writes into whichever cell happens to be running.
"""

from __future__ import annotations

import contextlib
import html
import sys
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

__all__ = ["ANSWER_CHARS", "FallbackDisplay", "dashboard_summary", "run_summary", "with_summary"]

ANSWER_CHARS = 2000
"""Longest answer a summary quotes; the full text stays in the store."""

_PLAIN = "text/plain"
_HTML = "text/html"


def _answer(text: str) -> str:
    text = text.strip()
    return text if len(text) <= ANSWER_CHARS else text[: ANSWER_CHARS - 1] + "…"


def _pending(approvals: Sequence[Mapping[str, Any]]) -> list[str]:
    from ..._display import call_text

    return [
        call_text(str(card.get("tool_name", "")), card.get("args") or {})
        for card in approvals
        if card.get("state") in ("pending", "sending")
    ]


def run_summary(
    run_id: str,
    status: str,
    *,
    summary: str = "",
    progress: str = "",
    text: str = "",
    approvals: Sequence[Mapping[str, Any]] = (),
) -> dict[str, str]:
    """A run's ``text/plain`` and ``text/html`` summaries: state, answer, pending approvals.

    Args:
        run_id: The run.
        status: Its state.
        summary: Why it stopped or what it waits for, in one line.
        progress: Steps, tokens and cost, in one line.
        text: The run's text so far (its answer once it completed).
        approvals: The widget's approval cards; the pending ones are listed.
    """
    pending = _pending(approvals)
    answer = _answer(text)
    head = f"nbdurable run {run_id}: {status}"
    plain = [head]
    plain += [f"  {line}" for line in (summary, progress) if line and line != status]
    if pending:
        plain.append("  pending approvals:")
        plain += [f"    {call}" for call in pending]
    if answer:
        plain += ["", answer]
    esc = html.escape
    lines = [f"<b>nbdurable run <code>{esc(run_id)}</code>: {esc(status)}</b>"]
    lines += [f"<div>{esc(line)}</div>" for line in (summary, progress) if line and line != status]
    if pending:
        calls = "".join(f"<li><code>{esc(call)}</code></li>" for call in pending)
        lines.append(f"<div>pending approvals:</div><ul>{calls}</ul>")
    if answer:
        lines.append(
            "<div style='white-space: pre-wrap; border-left: 3px solid #1a7f37; "
            f"padding-left: 8px; margin-top: 4px'>{esc(answer)}</div>"
        )
    page = (
        "<div class='nbdurable-fallback' style='font-family: sans-serif; "
        f"padding: 6px 8px; border: 1px solid #d0d7de; border-radius: 6px'>{''.join(lines)}</div>"
    )
    return {_PLAIN: "\n".join(plain), _HTML: page}


def dashboard_summary(
    counts: Mapping[str, int],
    rows: Sequence[Mapping[str, Any]],
    approvals: Sequence[Mapping[str, Any]],
) -> dict[str, str]:
    """The runs dashboard's ``text/plain`` and ``text/html`` summaries.

    Args:
        counts: Runs per status.
        rows: The page of runs shown (each with its display ``cells``).
        approvals: The calls waiting for a verdict.
    """
    total = sum(counts.values())
    by_status = ", ".join(f"{n} {status}" for status, n in counts.items())
    plain = [f"nbdurable runs: {total}" + (f" ({by_status})" if by_status else "")]
    waiting = [a for a in approvals if a.get("state") == "pending"]
    if waiting:
        plain.append(f"  {len(waiting)} call(s) waiting for approval:")
        plain += [f"    {a.get('run_id')}: {a.get('call')}" for a in waiting]
    keys = ("run_id", "status", "agent", "steps", "tokens", "cost", "age", "reason")
    table = [[str(row.get("cells", {}).get(k, "")) for k in keys] for row in rows]
    plain += ["  " + "  ".join(cells).rstrip() for cells in table]
    esc = html.escape
    head = "".join(f"<th>{esc(k)}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>" for cells in table
    )
    calls = "".join(
        f"<li>{esc(str(a.get('run_id')))}: <code>{esc(str(a.get('call')))}</code></li>"
        for a in waiting
    )
    page = f"<b>{esc(plain[0])}</b>"
    if waiting:
        page += f"<div>waiting for approval:</div><ul>{calls}</ul>"
    page += f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return {_PLAIN: "\n".join(plain), _HTML: f"<div class='nbdurable-fallback'>{page}</div>"}


def with_summary(shown: Any, summary: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A widget's mime bundle (a dict, or anywidget's ``(data, metadata)``) plus ``summary``.

    The summary replaces the widget's ``repr`` as ``text/plain`` and adds ``text/html``;
    the widget view itself is kept, so a live front end still renders the widget.
    """
    data, metadata = shown if isinstance(shown, tuple) else (shown or {}, {})
    return {**data, **summary}, dict(metadata)


class FallbackDisplay:
    """The outputs one widget was displayed into, kept up to date with its summary.

    Args:
        bundle: The widget's whole mime bundle now, ``(data, metadata)``: its
            ``_repr_mimebundle_`` after :func:`with_summary`.
    """

    def __init__(self, bundle: Callable[[], tuple[dict[str, Any], dict[str, Any]]]) -> None:
        self._bundle = bundle
        self._ids: list[str] = []
        self._last: dict[str, Any] | None = None
        self._again = False

    def show(self) -> None:
        """Display the widget as a new output that :meth:`refresh` can update."""
        from IPython.display import display

        _hook_next_cell()
        display_id = uuid.uuid4().hex
        self._ids.append(display_id)
        data, metadata = self._bundle()
        self._last = data
        display(data, raw=True, metadata=metadata, display_id=display_id)  # type: ignore[no-untyped-call]

    def refresh(self) -> None:
        """Rewrite every output of the widget with its current summary, if it changed."""
        if not self._ids:
            return
        data, metadata = self._bundle()
        if data == self._last:
            return
        self._last = data
        self._send(data, metadata)
        # A run that ends between two cells is tagged with the finished one, which
        # nbclient no longer hears: the next cell sends it once more (_next_cell).
        self._again = True
        _AWAITING_NEXT_CELL.add(self)

    def _send(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        from IPython.display import update_display

        with _as_latest_request():
            for display_id in self._ids:
                update_display(data, raw=True, metadata=metadata, display_id=display_id)  # type: ignore[no-untyped-call]

    def send_again(self) -> None:
        """Send the last update once more (as part of the cell that runs now)."""
        if self._again and self._last is not None:
            self._again = False
            self._send(self._last, self._bundle()[1])


_AWAITING_NEXT_CELL: weakref.WeakSet[FallbackDisplay] = weakref.WeakSet()
_HOOKED: list[bool] = []


def _next_cell(*_info: Any) -> None:
    for display in list(_AWAITING_NEXT_CELL):
        display.send_again()
    _AWAITING_NEXT_CELL.clear()


def _hook_next_cell() -> None:
    """Call :func:`_next_cell` before every cell, once per kernel."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None and not _HOOKED:
        shell.events.register("pre_run_cell", _next_cell)
        _HOOKED.append(True)


@contextlib.contextmanager
def _as_latest_request() -> Iterator[None]:
    """Send displays as part of the request the kernel handles last, not the showing cell.

    The refresh runs in the following task the showing cell started; ipykernel
    would tag its update with that finished cell, and clients that keep only
    the running cell's messages (nbclient, ``nbconvert --execute``: the outputs
    an executed notebook saves) would drop it. Outside a kernel: nothing to do.
    """
    kernelbase = sys.modules.get("ipykernel.kernelbase")
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    kernel_class: Any = kernelbase.Kernel if kernelbase is not None else None
    publisher = getattr(shell, "display_pub", None)
    if kernel_class is None or not kernel_class.initialized() or publisher is None:
        yield
        return
    if not hasattr(publisher, "set_thread_parent"):
        yield
        return
    token = publisher.set_thread_parent(kernel_class.instance().get_parent())
    try:
        yield
    finally:
        publisher.reset_thread_parent(token)
