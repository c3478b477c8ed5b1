"""Rows to typed DataFrames, with an HTML view that stays readable for long texts.

This module imports pandas; the rest of :mod:`nbdurable.inspect` imports it
only when a DataFrame is asked for, so ``import nbdurable`` never does.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ..runs import RUN_STATES
from ._arrays import categorical, int64, nullable, utc_datetimes

__all__ = ["InspectFrame", "STATUSES", "columns_frame", "frame"]

# Run states in their lifecycle order, with the checkpoint-only status after the
# states that mean "waiting for a human".
STATUSES: tuple[str, ...] = (*RUN_STATES[:6], "suspended", *RUN_STATES[6:])
"""Every status a run or checkpoint can show: run states and checkpoint statuses."""

_CELL_CSS = (
    "max-width: 32em; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; "
    "text-align: left"
)
_STATUS_COLOURS = {
    "completed": "#1a7f37",
    "failed": "#cf222e",
    "cancelled": "#6e7781",
    "waiting_approval": "#9a6700",
    "suspended": "#9a6700",
    "needs_attention": "#cf222e",
    "retry_wait": "#9a6700",
    "running": "#0969da",
}


class InspectFrame(pd.DataFrame):  # type: ignore[misc]  # pandas ships no stubs here
    """A :class:`pandas.DataFrame` whose notebook view keeps every row one line high.

    It is a plain DataFrame in every other respect; operations that derive a
    new frame return this class again (pandas' subclassing protocol).
    """

    @property
    def _constructor(self) -> type[InspectFrame]:
        return InspectFrame

    def _repr_html_(self) -> str | None:
        if len(self) > 200 or len(self.columns) > 40:
            return super()._repr_html_()  # type: ignore[no-any-return]
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in [self.index.name or "", *self])
        body = []
        for index, row in self.iterrows():
            cells = [f"<th>{html.escape(_text(index))}</th>"]
            for column, value in row.items():
                cells.append(_cell(str(column), value))
            body.append("<tr>" + "".join(cells) + "</tr>")
        return (
            '<table class="dataframe nbdurable-frame" style="table-layout: auto">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"<p style='color: #6e7781'>{len(self)} rows x {len(self.columns)} columns</p>"
        )


def _text(value: Any) -> str:
    if value is None or (not isinstance(value, (list, dict, str)) and pd.isna(value)):
        return ""
    if isinstance(value, pd.Timestamp):
        return str(value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3])
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _cell(column: str, value: Any) -> str:
    text = _text(value)
    style = _CELL_CSS
    colour = _STATUS_COLOURS.get(text) if column in ("status", "type") else None
    if colour is not None:
        style += f"; color: {colour}; font-weight: 600"
    # The full value goes to the tooltip: the cell shows one line, a hover shows all.
    return f'<td style="{style}" title="{html.escape(text)}">{html.escape(text)}</td>'


def frame(
    rows: Sequence[dict[str, Any]],
    *,
    columns: Sequence[str],
    index: str,
    categories: dict[str, Sequence[str]] | None = None,
    datetimes: Sequence[str] = (),
    integers: Sequence[str] = (),
    floats: Sequence[str] = (),
) -> InspectFrame:
    """Typed frame of ``rows``: :func:`columns_frame` of their columns.

    A key a row lacks is None in its column.
    """
    values: dict[str, list[Any]] = {name: [] for name in columns}
    appends = [(name, values[name].append) for name in columns]
    for row in rows:
        for name, add in appends:
            add(row.get(name))
    return columns_frame(
        values,
        columns=columns,
        index=index,
        categories=categories,
        datetimes=datetimes,
        integers=integers,
        floats=floats,
    )


def columns_frame(
    values: Mapping[str, Sequence[Any]],
    *,
    columns: Sequence[str],
    index: str,
    categories: dict[str, Sequence[str]] | None = None,
    datetimes: Sequence[str] = (),
    integers: Sequence[str] = (),
    floats: Sequence[str] = (),
) -> InspectFrame:
    """Typed frame: categories, UTC datetimes from epoch ms, nullable integers and floats.

    ``values`` holds each of ``columns`` (equal lengths); ``index`` names the
    one that becomes the index. Built column by column, each column once in
    its final type: the same frame as ``DataFrame.from_records`` then
    ``astype``/``set_index`` per column, at a fraction of the cost (every
    pandas call costs tens of microseconds; a 500-step history frame made
    about forty of them). A column of Python ints goes in as an int64 array,
    the dtype pandas would infer from the list, without its inference.
    """
    names = list(columns)
    special = {name: "category" for name in categories or {}}
    special.update({name: "datetime" for name in datetimes})
    special.update({name: "Int64" for name in integers})
    special.update({name: "Float64" for name in floats})
    data: dict[str, Any] = {}
    for name in names:
        if name == index:
            continue
        column = values[name]
        kind = special.get(name)
        if kind == "category":
            data[name] = categorical(column, (categories or {})[name])
        elif kind == "datetime":
            data[name] = utc_datetimes(column)
        elif kind is not None:
            data[name] = nullable(column, kind)
        else:
            found = int64(column)
            data[name] = found if found is not None else column
    keys = values[index]
    found = int64(keys)
    index_values = pd.Index(found if found is not None else keys, name=index)
    return InspectFrame(data, index=index_values)  # data holds the columns in their order
