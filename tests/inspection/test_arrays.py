"""The frames' typed columns are the arrays pandas' own constructors give, for any values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from nbdurable.inspect._arrays import categorical, int64, nullable, utc_datetimes

NAN = float("nan")


@pytest.mark.parametrize(
    "column",
    [
        [1, 2, 3],
        [1, None, 3],
        [None, None],
        [],
        [True, 1],
        [1.0, 2],
        [2**70, 1],
        [NAN, 1],
        ["1", 2],
    ],
)
def test_nullable_integers_are_pd_array_or_its_error(column: list[Any]) -> None:
    _same(lambda: nullable(column, "Int64"), lambda: pd.array(column, dtype="Int64"))


@pytest.mark.parametrize(
    "column",
    [[0.5, None, 1.25], [NAN, 0.5], [None], [], [1, 0.5], [2**70, 0.5], [True, 0.5], ["x"]],
)
def test_nullable_floats_are_pd_array_or_its_error(column: list[Any]) -> None:
    _same(lambda: nullable(column, "Float64"), lambda: pd.array(column, dtype="Float64"))


@pytest.mark.parametrize(
    "column",
    [
        [1_700_000_000_000, 1_700_000_000_001],
        [0, -1],
        [1_700_000_000_000, None],
        [],
        [10**16],  # beyond pandas' nanosecond range
        [-(10**16)],
        [8_999_999_999_999],
        [1.5],
    ],
)
def test_utc_datetimes_are_to_datetime_or_its_error(column: list[Any]) -> None:
    def expected() -> Any:
        return pd.to_datetime(pd.Series(column, dtype="object"), unit="ms", utc=True).array

    _same(lambda: utc_datetimes(column), expected)


@pytest.mark.parametrize(
    ("column", "known"),
    [
        (["running", "completed", None], ("running", "suspended", "completed")),
        (["zeta", "running", "alpha", NAN], ("running",)),
        ([], ("running",)),
        ([["unhashable"], "running"], ("running",)),
        ([1, 2.0, True], ()),
    ],
)
def test_categoricals_are_pd_categorical(column: list[Any], known: tuple[Any, ...]) -> None:
    extra = sorted(
        {v for v in column if not isinstance(v, list) and v is not None and v == v} - set(known)
    )

    def expected() -> Any:
        return pd.Categorical(column, categories=[*known, *extra])

    _same(lambda: categorical(column, known), expected)


def test_int64_is_what_pandas_infers_from_the_list() -> None:
    for column in ([1, 2], [2**62, -5]):
        found = int64(column)
        assert found is not None
        assert found.dtype == pd.Series(column).dtype == np.int64
    for column in ([], [1, None], [True], [2**64], [1.0]):
        assert int64(column) is None


def _same(found: Any, expected: Any) -> None:
    try:
        want = expected()
    except Exception as exc:
        with pytest.raises(type(exc)):
            found()
        return
    got = found()
    assert type(got) is type(want)
    assert got.dtype == want.dtype
    pd.testing.assert_extension_array_equal(got, want)
