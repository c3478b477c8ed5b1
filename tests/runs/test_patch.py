"""RunPatch: a typed change of a run record; a misspelt field fails, never silently does nothing."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from nbdurable.runs import UNSET, RunPatch, RuntimeRun

NOW = 1_800_000_000_000


def _run() -> RuntimeRun:
    return RuntimeRun(
        run_id="r1",
        agent_id="a",
        agent_version="1",
        session_id="s1",
        prompt='"hi"',
        state="failed",
        reason="model_error",
        created_at=NOW,
        updated_at=NOW,
    )


def test_every_field_but_the_id_is_a_patch_field_typed_as_on_the_record() -> None:
    record = {name: str(field.annotation) for name, field in RuntimeRun.model_fields.items()}
    hints = {f.name: f.type for f in dataclasses.fields(RunPatch)}
    assert set(hints) == set(record) - {"run_id"}
    for name, hint in hints.items():
        assert isinstance(hint, str) and " | _Unset" in hint, name
    # the same types, spelled as in the record's annotations
    source = (Path(__file__).parents[2] / "nbdurable" / "runs" / "_record.py").read_text()
    for name, hint in hints.items():
        assert f"    {name}: {hint.replace(' | _Unset', '')}" in source, name


def test_a_patch_sets_only_its_fields_and_none_is_a_value() -> None:
    run = _run()
    patch = RunPatch(state="pending", reason=None)
    assert patch.changes() == {"state": "pending", "reason": None}
    assert patch.fields_set == {"state", "reason"}
    applied = patch.apply(run)
    assert (applied.state, applied.reason, applied.updated_at) == ("pending", None, NOW)
    assert RunPatch().apply(run) == run and not RunPatch() and patch
    assert patch.error is UNSET and not UNSET  # unset reads falsy: ``patch.error or None``


def test_patches_combine_later_wins_and_written_fields_are_dropped() -> None:
    first = RunPatch(state="running", operations=1)
    later = RunPatch(operations=2, updated_at=NOW)
    assert (first | later).changes() == {"state": "running", "operations": 2, "updated_at": NOW}
    waiting = RunPatch(operations=2, model_attempts=0)
    assert waiting.without(RunPatch(operations=2, model_attempts=1)).changes() == {
        "model_attempts": 0
    }


def test_a_misspelt_field_is_a_runtime_error() -> None:
    with pytest.raises(TypeError, match="staus"):
        RunPatch(staus="failed")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="staus"):
        _run().model_copy(update={"staus": "failed"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunPatch().state = "failed"  # type: ignore[misc]


def test_a_misspelt_field_is_a_type_error(tmp_path: Path) -> None:
    code = tmp_path / "misspelt.py"
    code.write_text(
        "from nbdurable.runs._patch import RunPatch\n"
        'RunPatch(staus="failed")\n'
        'RunPatch(state="finished")\n'
        "RunPatch(operations=None)\n"
        'RunPatch(state="failed", reason=None, operations=2)\n'
    )
    root = Path(__file__).parents[2]
    runs = root / "nbdurable" / "runs"
    # the patch and the states only (the rest is skipped): seconds, not a whole-package check
    checked = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--strict", "--follow-imports=skip",
            "--cache-dir", str(tmp_path / "cache"),
            str(runs / "_patch.py"), str(runs / "_states.py"), str(code),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    errors = [line for line in checked.stdout.splitlines() if line.startswith(str(code))]
    assert len(errors) == 3, checked.stdout
    assert 'Unexpected keyword argument "staus" for "RunPatch"' in errors[0]
    assert 'Argument "state" to "RunPatch" has incompatible type' in errors[1]
    assert 'Argument "operations" to "RunPatch" has incompatible type "None"' in errors[2]


def test_the_text_policy_applies_to_patched_strings() -> None:
    applied = RunPatch(error="ValueError: \udc80").apply(_run())
    assert applied.error == "ValueError: \ufffd"
