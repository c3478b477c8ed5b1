"""``notebooks/06-scale-out-on-temporal`` on Restate (``NBDURABLE_DEMO_ENGINE=restate``)
runs top to bottom, headless, in a real kernel: the notebook's second engine.

Like test_notebook_temporal.py: nbclient executes it twice in a row in a temporary
copy of ``notebooks/`` (kernel python3, NBDURABLE_DEMO_AUTO_APPROVE=1); each time the
notebook starts its own ``restate-server`` and endpoint process and stops them, and
the second run finds the store of the first. Skipped without the restate extra or
the ``restate-server`` binary (and without the temporal extra: the notebook's first
cell checks for it, its default engine).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tiers import skip_without

from .running import NOTEBOOKS, everything, execute_twice

for _module in ("nbformat", "nbclient", "ipykernel", "pandas"):
    skip_without(_module)  # found, not imported: the tests import what they use
pytest.importorskip("restate", reason="the restate extra is not installed")
pytest.importorskip("temporalio", reason="the temporal extra is not installed")

import nbdurable as nd  # noqa: E402
from nbdurable.restate._devserver import restate_binary  # noqa: E402

NAME = "06-scale-out-on-temporal"


def test_scale_out_notebook_on_restate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if restate_binary() is None:
        pytest.skip("the `restate-server` binary (npm @restatedev/restate-server) is missing")
    monkeypatch.setenv("NBDURABLE_DEMO_AUTO_APPROVE", "1")
    monkeypatch.setenv("NBDURABLE_DEMO_ENGINE", "restate")
    import nbformat

    committed = nbformat.read(NOTEBOOKS / f"{NAME}.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in committed.cells if c.cell_type == "code")
    for notebook in execute_twice(NAME, tmp_path):
        text = everything(notebook)
        assert "restate-server: ingress" in text
        assert "nbdurable worker (restate) serving" in text  # the endpoint registered
        assert "waiting_approval" in text and "drop_table {'name': 'stg_2023'}" in text
        assert "Done: dropped stg_2023 and kept stg_2024" in text
        assert "completed" in text and "Completed at step 3" in text  # runs, explain
        assert "stopped: worker" in text
    store = nd.open_store(f"sqlite:///{tmp_path / '.nbdurable' / '06-restate.db'}")
    try:
        assert nd.inspect.runs(store)["status"].tolist() == ["completed", "completed"]
        assert {r.engine for r in store.rt_list(["completed"])} == {"restate"}
    finally:
        store.close()
    assert not (tmp_path / ".nbdurable" / "06-temporal.db").exists()
