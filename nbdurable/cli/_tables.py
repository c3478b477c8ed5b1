"""Plain-text tables that fit the terminal: one line per row, long cells cut with "…"."""

from __future__ import annotations

import numbers
import shutil
import textwrap
import unicodedata
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

__all__ = ["cell", "clip", "key_values", "render", "terminal_width", "text_width"]

ELLIPSIS = "…"
GAP = "  "
MIN_COLUMN = 6
"""Columns are not shrunk below this many characters (or their natural width)."""


def terminal_width() -> int:
    """The terminal's width in columns (100 when it cannot be told)."""
    return max(20, shutil.get_terminal_size((100, 24)).columns)


def _char_width(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def text_width(text: str) -> int:
    """How many terminal columns ``text`` takes (wide characters count two)."""
    return sum(_char_width(c) for c in text)


def clip(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` columns, ending with "…" when cut."""
    if text_width(text) <= width:
        return text
    if width <= 0:
        return ""
    kept, used = [], 0
    for char in text:
        size = _char_width(char)
        if used + size > width - 1:
            break
        kept.append(char)
        used += size
    return "".join(kept) + ELLIPSIS


def cell(value: Any) -> str:
    """One line of text for a value: empty for missing values, whitespace collapsed."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        return "" if value != value else f"{value:.6g}"  # NaN
    name = type(value).__name__
    if name in ("NAType", "NaTType"):  # pandas' missing values, without importing pandas
        return ""
    if hasattr(value, "strftime") and hasattr(value, "timestamp"):  # shown in local time
        return datetime.fromtimestamp(value.timestamp()).strftime("%Y-%m-%d %H:%M:%S")
    return " ".join(str(value).split())


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * max(0, width - text_width(text))
    return fill + text if right else text + fill


def _numeric(values: Sequence[Any]) -> bool:
    present = [v for v in values if cell(v) != ""]
    return bool(present) and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in present
    )


def render(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    width: int | None = None,
    right: Sequence[bool] | None = None,
    keep: Sequence[int] = (),
    weights: Sequence[float] | None = None,
    drop: Sequence[int] = (),
    whole: Sequence[int] = (),
) -> str:
    """A table whose every line fits ``width`` columns (default: the terminal's).

    Columns keep their natural width while the table fits. Otherwise columns
    with no value at all are left out, then the ``drop`` columns one by one,
    then the widest columns give way first, down to :data:`MIN_COLUMN`, their
    cells cut with "…". A row never wraps: if even the narrowest layout is too
    wide, lines are cut.

    Args:
        headers: Column titles.
        rows: Cell values (formatted with :func:`cell`).
        width: Columns available.
        right: Right-align each column (default: columns holding only numbers).
        keep: Indexes of columns never shrunk nor left out (an id, a status).
        weights: How much room each column claims when shrinking (default 1 each):
            a column of weight 2 keeps about twice the width of one of weight 1.
        drop: Indexes of the least useful columns, the first to be left out
            whole (in this order) before any column is cut.
        whole: Indexes of columns never cut (a cost, an age), though left out
            when they hold no value.
    """
    width = terminal_width() if width is None else width
    texts = [[cell(v) for v in row] for row in rows]
    if right is None:
        right = [_numeric([row[i] for row in rows]) for i in range(len(headers))]
    widths = [
        max([text_width(h)] + [text_width(row[i]) for row in texts]) for i, h in enumerate(headers)
    ]

    def total(columns: Sequence[int]) -> int:
        return sum(widths[i] for i in columns) + len(GAP) * (len(columns) - 1)

    if total(range(len(headers))) > width:
        shown = [i for i in range(len(headers)) if i in keep or any(row[i] for row in texts)]
        for i in drop:
            if total(shown) <= width:
                break
            if i in shown and i not in keep:
                shown.remove(i)
        headers = [headers[i] for i in shown]
        texts = [[row[i] for i in shown] for row in texts]
        right = [right[i] for i in shown]
        widths = [widths[i] for i in shown]
        weights = [weights[i] for i in shown] if weights is not None else None
        keep = [shown.index(i) for i in keep if i in shown]
        whole = [shown.index(i) for i in whole if i in shown]
    floor = [w if i in keep or i in whole else min(w, MIN_COLUMN) for i, w in enumerate(widths)]
    excess = sum(widths) + len(GAP) * (len(widths) - 1) - width
    while excess > 0:
        shrinkable = [i for i, w in enumerate(widths) if w > floor[i]]
        if not shrinkable:
            break
        claims = weights if weights is not None else [1.0] * len(widths)
        widest = max(shrinkable, key=lambda i: widths[i] / claims[i])
        widths[widest] -= 1
        excess -= 1
    lines = []
    for row in [list(headers), *texts]:
        parts = [_pad(clip(text, w), w, r) for text, w, r in zip(row, widths, right, strict=True)]
        lines.append(clip(GAP.join(parts).rstrip(), width))
    return "\n".join(lines)


def key_values(
    pairs: Sequence[tuple[str, Any]], *, width: int | None = None, wrap: Collection[str] = ()
) -> str:
    """``key  value`` lines, values cut to fit ``width`` columns; empty values left out.

    The values of the keys in ``wrap`` are wrapped over lines instead (a
    sentence that must be read whole, such as what a run waits for).
    """
    width = terminal_width() if width is None else width
    shown = [(k, cell(v)) for k, v in pairs if cell(v) != ""]
    if not shown:
        return ""
    keys = max(text_width(k) for k, _ in shown)
    lines = []
    for k, v in shown:
        line = f"{_pad(k, keys, False)}{GAP}{v}"
        if k in wrap:
            indent = " " * (keys + len(GAP))
            lines.append(textwrap.fill(line, max(width, keys + 20), subsequent_indent=indent))
        else:
            lines.append(clip(line, width))
    return "\n".join(lines)
