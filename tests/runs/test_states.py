"""Every set of run states is defined once, in ``nbdurable/runs/_states.py``.

A module that asks "is this run over?" or "does it wait for a human?" imports the
named set; a literal set, tuple or list of two or more run states (and nothing else)
anywhere else is a second definition that a new state would silently miss. Literals
that mix run states with other words are other vocabularies (a checkpoint's status,
an approval's, a leg outcome's kind, a table's columns) and are left alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbdurable
from nbdurable.runs import RUN_STATES

PACKAGE = Path(nbdurable.__file__).parent
CANONICAL = PACKAGE / "runs" / "_states.py"

# A graph's statuses (beside the run states they derive from) are a vocabulary of
# their own (what graph_status() answers) whose words happen to be run-state names;
# not a set that membership is tested in.
OTHER_VOCABULARIES: set[tuple[str, str]] = set()


def _is_state_set(node: ast.AST) -> bool:
    """A literal set, tuple or list of two or more run-state strings and nothing else."""
    if not isinstance(node, ast.Set | ast.Tuple | ast.List) or len(node.elts) < 2:
        return False
    return all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in RUN_STATES
        for e in node.elts
    )


def _state_literals(source: str, rel: str) -> list[str]:
    tree = ast.parse(source)
    allowed: set[int] = set()
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        for target in targets:
            if isinstance(target, ast.Name) and (rel, target.id) in OTHER_VOCABULARIES:
                allowed.update(id(n) for n in ast.walk(node))
    return [
        f"{rel}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if _is_state_set(node) and id(node) not in allowed
    ]


def test_run_state_sets_are_defined_only_beside_the_run_states() -> None:
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != CANONICAL
        for hit in _state_literals(
            path.read_text(encoding="utf-8"), path.relative_to(PACKAGE.parent).as_posix()
        )
    ]
    assert found == [], "run-state sets defined outside runs/_states.py:\n" + "\n".join(found)


def test_the_check_sees_each_shape_of_a_state_set() -> None:
    rel = "nbdurable/x.py"
    assert _state_literals('W = frozenset({"waiting_approval", "needs_attention"})', rel)
    assert _state_literals('if s in ("failed", "needs_attention"): pass', rel)
    assert _state_literals('rows = list_runs(["queued", "pending"])', rel)
    assert not _state_literals('S = ("running", "suspended", "completed")', rel)
    assert not _state_literals('if s == "failed": pass', rel)
