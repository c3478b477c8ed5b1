"""The plain-text table renderer: fits the width, cuts with "…", never wraps a row."""

from __future__ import annotations

from datetime import UTC, datetime

from nbdurable.cli._tables import cell, clip, key_values, render, text_width


def test_a_table_that_fits_keeps_natural_widths_and_right_aligns_numbers() -> None:
    table = render(["name", "n"], [["a", 1], ["bbb", 22]], width=100)
    assert table.splitlines() == ["name   n", "a      1", "bbb   22"]


def test_long_cells_are_cut_with_an_ellipsis_and_every_line_fits() -> None:
    rows = [["run-1", "x" * 300, "y" * 80], ["run-2", "short", "z"]]
    for width in (100, 60, 30):
        lines = render(["id", "text", "more"], rows, width=width, keep=[0]).splitlines()
        assert len(lines) == 3  # one line per row: never wrapped
        assert all(text_width(line) <= width for line in lines)
        assert "…" in lines[1] and lines[1].startswith("run-1")


def test_kept_columns_are_never_cut_and_empty_columns_go_first() -> None:
    rows = [["run-1b7ae95e21e44eaa", None, "t" * 200]]
    lines = render(["run", "cost", "text"], rows, width=60, keep=[0]).splitlines()
    assert lines[0].split() == ["run", "text"]  # the empty column left out
    assert lines[1].startswith("run-1b7ae95e21e44eaa  ttt")


def test_drop_leaves_columns_out_whole_in_order_before_cutting_any() -> None:
    headers = ["run", "agent", "cost", "owner", "graph"]
    rows = [["run-1", "janitor", "$0.0012", "task-1234567", "nightly (completed)"]]
    natural = render(headers, rows, width=200).splitlines()[0]
    assert natural.split() == headers
    # owner goes first, then graph; nothing is cut while leaving out suffices
    table = render(headers, rows, width=45, keep=[0], drop=[3, 4])
    assert table.splitlines()[0].split() == ["run", "agent", "cost", "graph"]
    assert "…" not in table
    table = render(headers, rows, width=30, keep=[0], drop=[3, 4])
    assert table.splitlines()[0].split() == ["run", "agent", "cost"] and "…" not in table
    # past the drop list, cells are cut
    table = render(headers, rows, width=20, keep=[0], drop=[3, 4])
    assert "…" in table and all(text_width(line) <= 20 for line in table.splitlines())


def test_whole_columns_are_never_cut_but_go_when_empty() -> None:
    rows = [["run-1", "a-very-long-agent-name", "$0.0012"]]
    line = render(["run", "agent", "cost"], rows, width=24, keep=[0], whole=[2]).splitlines()[1]
    assert line.endswith("$0.0012") and "…" in line
    empty = render(["run", "agent", "cost"], [["run-1", "x" * 40, None]], width=24, whole=[2])
    assert empty.splitlines()[0].split() == ["run", "agent"]


def test_weights_share_the_room_when_shrinking() -> None:
    rows = [["a" * 100, "b" * 100]]
    line = render(["x", "y"], rows, width=62, weights=[2, 1]).splitlines()[1]
    x, y = line.split("  ")
    assert text_width(x) == 40 and text_width(y) == 20


def test_wide_characters_count_two_columns() -> None:
    assert text_width("日本") == 4
    assert clip("日本語のテキスト", 7) == "日本語…"
    lines = render(["t"], [["日本語のテキスト" * 10]], width=21).splitlines()
    assert [text_width(line) for line in lines] == [1, 21]


def test_no_line_exceeds_the_width_even_when_columns_cannot_shrink_enough() -> None:
    rows = [[f"c{i}" * 3 for i in range(30)]]
    table = render([f"h{i}" for i in range(30)], rows, width=40)
    assert all(text_width(line) <= 40 for line in table.splitlines())


def test_cells_are_one_line_and_missing_values_are_blank() -> None:
    assert cell(None) == "" and cell(float("nan")) == ""
    assert cell("a\nb\t c") == "a b c"
    assert cell(3) == "3" and cell(True) == "yes"
    when = datetime(2024, 5, 1, 12, 0, 3, tzinfo=UTC)
    assert cell(when) == datetime.fromtimestamp(when.timestamp()).strftime("%Y-%m-%d %H:%M:%S")


def test_key_values_align_keys_and_skip_empty_values() -> None:
    text = key_values([("run", "r1"), ("error", None), ("status", "x" * 200)], width=40)
    assert text.splitlines()[0] == "run     r1"
    assert len(text.splitlines()) == 2 and text_width(text.splitlines()[1]) <= 40
