"""The span timeline: a Gantt chart of a run's spans, one row per step.

Drawn from the frame :func:`~nbdurable.inspect.spans` returns. Each step's row
holds its model calls, tool calls (concurrent calls share the row in thinner
lanes) and the waits that delayed it; the top row holds the legs. Times are
relative to the run's first span, in the unit that suits the run's length.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COLOURS", "draw_spans"]

COLOURS: dict[str, str] = {
    "leg": "#d0d7de",
    "model_call": "#0969da",
    "tool_call": "#bf8700",
    "approval_wait": "#8250df",
    "retry_wait": "#cf222e",
    "attention_wait": "#bc4c00",
    "queue_wait": "#6e7781",
    "takeover_gap": "#1b1f24",
}
_LABELS = {
    "leg": "leg",
    "model_call": "model call",
    "tool_call": "tool call",
    "approval_wait": "approval wait",
    "retry_wait": "retry wait",
    "attention_wait": "attention wait",
    "queue_wait": "queue wait",
    "takeover_gap": "takeover gap",
}
_WAITS = frozenset({"approval_wait", "retry_wait", "attention_wait", "queue_wait", "takeover_gap"})
_UNITS = ((3_600_000.0, "h"), (60_000.0, "min"), (1_000.0, "s"), (1.0, "ms"))


def _unit(total_ms: float) -> tuple[float, str]:
    for scale, name in _UNITS:
        if total_ms >= 10 * scale:
            return scale, name
    return 1.0, "ms"


def _lanes(intervals: list[tuple[float, float]]) -> list[int]:
    """A lane per interval such that no two overlapping intervals share one."""
    ends: list[float] = []
    lanes: list[int] = []
    for start, end in intervals:
        for lane, busy_until in enumerate(ends):
            if busy_until <= start:
                ends[lane] = end
                lanes.append(lane)
                break
        else:
            ends.append(end)
            lanes.append(len(ends) - 1)
    return lanes


def draw_spans(frame: Any, axes: Any) -> None:
    """Draw the spans of ``frame`` on ``axes``: one ``barh`` call per kind (a legend entry)."""
    rows = frame.reset_index().to_dict("records")
    starts = [_ms(r["start"]) or 0 for r in rows]
    ends = [_ms(r["end"]) for r in rows]
    latest = max([*starts, *(e for e in ends if e is not None)], default=0)
    last = [latest if e is None else e for e in ends]  # an open span runs to the log's end
    origin = min(starts, default=0)
    total = latest - origin
    scale, unit = _unit(float(total))
    # A bar of 0 ms (or one drowned by an hours-long wait) still shows as a sliver.
    least = max(total, 1) / scale / 300
    steps = sorted({int(r["step_index"]) for r in rows if _known(r["step_index"])})
    row_of = {step: position + 1 for position, step in enumerate(steps)}
    placed: dict[str, list[tuple[float, float, float, float]]] = {}
    for (step, is_tool), members in _groups(rows).items():
        intervals = [((starts[i] - origin) / scale, (last[i] - origin) / scale) for i in members]
        lanes = _lanes(intervals) if is_tool else [0] * len(members)
        count = max(lanes) + 1 if lanes else 1
        for i, lane, (begin, end) in zip(members, lanes, intervals, strict=True):
            kind = str(rows[i]["kind"])
            height = 0.8 / count
            top = (row_of[step] if step is not None else 0) - 0.4
            centre = top + height * lane + height / 2
            placed.setdefault(kind, []).append((centre, max(end - begin, least), begin, height))
    for kind in COLOURS:
        bars = placed.get(kind)
        if not bars:
            continue
        axes.barh(
            [b[0] for b in bars],
            [b[1] for b in bars],
            left=[b[2] for b in bars],
            height=[b[3] for b in bars],
            color=COLOURS[kind],
            hatch="//" if kind in _WAITS else None,
            edgecolor="white" if kind in _WAITS else COLOURS[kind],
            linewidth=0.5,
            label=_LABELS[kind],
        )
    axes.set_yticks(range(len(steps) + 1), ["legs", *(f"step {s}" for s in steps)])
    axes.set_ylim(len(steps) + 0.6, -0.6)
    axes.set_xlabel(f"{unit} since the run's first span")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    axes.grid(axis="x", color="#eaeef2")
    axes.set_axisbelow(True)


def _known(value: Any) -> bool:
    import pandas as pd

    return not pd.isna(value)


def _ms(value: Any) -> int | None:
    return None if not _known(value) else int(value.value // 1_000_000)


def _groups(rows: list[dict[str, Any]]) -> dict[tuple[int | None, bool], list[int]]:
    """Row indices by (the row they go on, whether they are tool calls)."""
    groups: dict[tuple[int | None, bool], list[int]] = {}
    for i, row in enumerate(rows):
        kind = str(row["kind"])
        step = int(row["step_index"]) if _known(row["step_index"]) and kind != "leg" else None
        groups.setdefault((step, kind == "tool_call"), []).append(i)
    return groups
