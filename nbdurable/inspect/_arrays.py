"""Typed pandas arrays from lists of Python values, without pandas' per-call inference.

Each function returns the array pandas' own constructor gives for the list
(``pd.array(values, dtype=...)``, ``pd.Categorical``, ``pd.to_datetime``), built
from numpy arrays when the values are of the plain types the inspection rows
hold, and by that constructor otherwise. A 500-step history frame has a dozen
such columns; pandas' generic paths cost about half of building it (issue 42).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["categorical", "int64", "nullable", "utc_datetimes"]

_NONE = type(None)
_INTEGERS = frozenset({int, _NONE})
_FLOATS = frozenset({float, _NONE})
# Epoch milliseconds within ±285 years of 1970: in range at any datetime unit pandas
# picks (nanoseconds reach 1677-2262), so converting them can neither overflow nor raise.
_SAFE_MS = 9_000_000_000_000


def int64(column: Sequence[Any]) -> np.ndarray[Any, Any] | None:
    """``column`` as an int64 array when every value is a Python int that fits, else None.

    What pandas infers for such a list, given as the array itself.
    """
    if not column or set(map(type, column)) != {int}:
        return None
    try:
        return np.array(column, dtype=np.int64)
    except OverflowError:  # pandas keeps such a column as it would infer it
        return None


def nullable(column: Sequence[Any], kind: str) -> Any:
    """``pd.array(column, dtype=kind)`` for ``kind`` "Int64" or "Float64": None (and NaN) is NA.

    A column of ints (floats, for "Float64") and None is built from a values
    array and a mask, in one numpy call each when no value or every value is
    None; anything else by ``pd.array`` itself.
    """
    types = set(map(type, column))
    if kind == "Int64" and types <= _INTEGERS:
        try:
            if _NONE not in types:
                values = np.array(column, dtype=np.int64)
                mask = np.zeros(len(column), dtype=bool)
            else:
                values = np.array([0 if v is None else v for v in column], dtype=np.int64)
                mask = np.array([v is None for v in column], dtype=bool)
        except OverflowError:
            return pd.array(column, dtype=kind)
        return pd.arrays.IntegerArray(values, mask)
    if kind == "Float64" and types <= _FLOATS:
        if types == {_NONE}:
            values = np.zeros(len(column), dtype=np.float64)
            mask = np.ones(len(column), dtype=bool)
        else:
            values = np.array([np.nan if v is None else v for v in column], dtype=np.float64)
            mask = np.isnan(values)  # NaN counts as missing, as pd.array has it
            values[mask] = 0.0
        return pd.arrays.FloatingArray(values, mask)
    return pd.array(column, dtype=kind)


def utc_datetimes(column: Sequence[Any]) -> Any:
    """``pd.to_datetime(column, unit="ms", utc=True)``'s array (None is NaT).

    Epoch milliseconds of this era, all known, are converted by numpy to the
    unit pandas gives such a conversion (:func:`_utc_dtype`).
    """
    found = int64(column)
    if found is not None and found.min() > -_SAFE_MS and found.max() < _SAFE_MS:
        dtype = _utc_dtype()
        return pd.array(found.astype("datetime64[ms]").astype(dtype.base), dtype=dtype)
    stamps = pd.to_datetime(pd.Series(column, dtype="object"), unit="ms", utc=True)
    return stamps.array  # the frame's own index, not the Series' 0..n-1


@functools.cache
def _utc_dtype() -> Any:
    """The dtype ``pd.to_datetime(..., unit="ms", utc=True)`` gives (its unit varies by version)."""
    return pd.to_datetime(np.array([0], dtype=np.int64), unit="ms", utc=True).dtype


def categorical(column: Sequence[Any], known: Sequence[str]) -> pd.Categorical:
    """``pd.Categorical`` of ``column``: ``known`` categories, then its other values sorted.

    Missing values (None, NaN) have no category. Built from codes and a
    dtype made once per set of categories: each value is looked up once.
    """
    extra = sorted({v for v in column if v is not None and v == v} - set(known))
    order = (*known, *extra)
    code = {value: i for i, value in enumerate(order)}
    try:
        codes = np.array([code.get(v, -1) for v in column], dtype=np.int64)
        dtype = _categories(order)
    except TypeError:  # a value that is not hashable
        return pd.Categorical(column, categories=list(order))
    return pd.Categorical.from_codes(codes, dtype=dtype)


@functools.lru_cache(maxsize=64)
def _categories(order: tuple[Any, ...]) -> pd.CategoricalDtype:
    return pd.CategoricalDtype(list(order))
