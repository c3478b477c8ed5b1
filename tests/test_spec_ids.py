"""Every checklist id is proven by a test, and ids live only in ``pytest.mark.spec``.

The ids are listed in tests/spec_ids.txt (regenerated from the checklist by
tests/support/spec_ids.py). The markers are read from the test sources, not from
a collection, so the check holds whatever ``-k`` or path selects.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

from support.spec_ids import read_list

TESTS = Path(__file__).resolve().parent
SPEC_IDS = TESTS / "spec_ids.txt"
AN_ID = re.compile(r"\bS\d{3}-\d{2}\b")
AN_ID_IN_A_NAME = re.compile(r"(?:^|_)s\d{3}_\d{2}(?:_|$)")
# The list's own machinery names ids in examples of the checklist's format.
ABOUT_IDS = {Path(__file__).resolve(), TESTS / "support" / "spec_ids.py"}


def _sources() -> Iterator[Path]:
    yield from sorted(TESTS.rglob("*.py"))


def _is_spec_marker(node: ast.AST) -> bool:
    """``pytest.mark.spec(...)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "spec"
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "mark"
        and isinstance(node.func.value.value, ast.Name)
        and node.func.value.value.id == "pytest"
    )


def _markers(path: Path) -> Iterator[tuple[ast.Call, str]]:
    """Each spec marker of a file, with where it is (file:line)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if _is_spec_marker(node):
            assert isinstance(node, ast.Call)
            yield node, f"{path.relative_to(TESTS)}:{node.lineno}"


def _carried() -> dict[str, list[str]]:
    carried: dict[str, list[str]] = {}
    for path in _sources():
        for call, where in _markers(path):
            assert call.args and not call.keywords, f"{where}: spec takes ids only"
            for arg in call.args:
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), (
                    f"{where}: spec ids are string literals"
                )
                carried.setdefault(arg.value, []).append(where)
    return carried


def test_the_list_holds_each_id_once() -> None:
    ids = read_list(SPEC_IDS.read_text(encoding="utf-8"))
    assert ids, "tests/spec_ids.txt is empty"
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]


def test_every_listed_id_is_carried_by_a_test() -> None:
    listed = read_list(SPEC_IDS.read_text(encoding="utf-8"))
    carried = _carried()
    missing = [i for i in listed if i not in carried]
    assert not missing, f"ids on tests/spec_ids.txt that no pytest.mark.spec carries: {missing}"


def test_every_marker_names_a_listed_id() -> None:
    listed = set(read_list(SPEC_IDS.read_text(encoding="utf-8")))
    unknown = {key: where for key, where in _carried().items() if key not in listed}
    assert not unknown, f"spec markers naming ids not on tests/spec_ids.txt: {unknown}"


def test_ids_appear_in_markers_only() -> None:
    """Not in test names, docstrings or comments: a marker is the one place."""
    stray: list[str] = []
    for path in _sources():
        if path in ABOUT_IDS:
            continue
        source = path.read_text(encoding="utf-8")
        in_markers = {
            (arg.lineno, arg.col_offset) for call, _ in _markers(path) for arg in call.args
        }
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            where = f"{path.relative_to(TESTS)}:{token.start[0]}"
            if token.type == tokenize.NAME and AN_ID_IN_A_NAME.search(token.string):
                stray.append(f"{where}: {token.string}")
            elif token.type in (tokenize.STRING, tokenize.COMMENT) and AN_ID.search(token.string):
                if token.type == tokenize.STRING and token.start in in_markers:
                    continue
                stray.append(f"{where}: {token.string.strip()[:70]}")
    assert not stray, "checklist ids outside pytest.mark.spec:\n" + "\n".join(stray)


def test_the_list_is_regenerated_from_a_checklist(tmp_path: Path) -> None:
    checklist = tmp_path / "CHECKLIST.md"
    checklist.write_text(
        "# Checklist\n\n### Part\n"
        "- **S000-01** First behaviour.\n"
        "- **S000-02** Second behaviour, *(implied)*.\n"
        "not an item: **S000-03**\n\n## Differences\n"
        "- **S000-01** Repeated where nbdurable differs.\n",
        encoding="utf-8",
    )
    out = tmp_path / "spec_ids.txt"
    script = TESTS / "support" / "spec_ids.py"
    done = subprocess.run(
        [sys.executable, str(script), str(checklist), "--output", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8") == (
        "S000-01 First behaviour.\nS000-02 Second behaviour, *(implied)*.\n"
    )
    assert read_list(out.read_text(encoding="utf-8")) == ["S000-01", "S000-02"]
