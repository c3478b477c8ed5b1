"""The demo notebooks (``notebooks/``) run top to bottom, headless, in a real kernel.

Each notebook is executed with nbclient in a temporary copy of ``notebooks/``
(the kernel's working directory, so ``.nbdurable/`` lands there), twice in a
row on the same folder (a second Restart & Run All finds the store the first
left), then checked: no error output, every code cell ran, and the outputs that
make its point (the quickstart's run completed, the forged token was denied,
...). The committed notebooks carry no outputs. The whole file takes about two
minutes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.tiers import skip_without

import nbdurable as nd
from nbdurable import inspect as ins

from .running import NOTEBOOKS, everything, execute_twice, run_all_twice_in_one_kernel, text_of

WIDGET = "application/vnd.jupyter.widget-view+json"

for _module in ("nbformat", "nbclient", "ipykernel", "anywidget", "matplotlib"):
    skip_without(_module)  # found, not imported: the tests import what they use

NAMES = [
    "01-quickstart",
    "02-approvals-and-signing",
    "03-crash-and-resume",
    "04-time-travel",
    "05-debug-a-stuck-run",
    "08-bring-your-own-stack",
    "09-approvals-for-a-team",
]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("NBDURABLE_APPROVAL_SECRET", raising=False)  # the 0600 file is shown
    monkeypatch.setenv("NBDURABLE_DEMO_AUTO_APPROVE", "1")  # nobody here to click Approve
    return tmp_path


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_is_clean_teaching_material(name: str) -> None:
    import nbformat

    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "outputs committed"
    assert notebook.cells[0].cell_type == "markdown"
    assert notebook.cells[0].source.startswith(f"# {name[:2]} · ")
    prose = [c for c in notebook.cells if c.cell_type == "markdown"]
    assert len(prose) * 2 >= len(code), "prose between the cells"
    assert max(len(c.source.splitlines()) for c in code) <= 30, "short cells"
    assert notebook.metadata.kernelspec.name == "python3"


def test_notebooks_readme_lists_every_notebook() -> None:
    readme = (NOTEBOOKS / "README.md").read_text()
    for name in NAMES:
        assert f"{name}.ipynb" in readme


def test_quickstart_runs_twice_on_the_default_store_and_streams_at_a_watchable_pace(
    folder: Path,
) -> None:
    """Executed twice in a row (Restart & Run All): two runs in ./.nbdurable/runs.db,
    each completed after one approval; the answer streams for more than 5 seconds (the
    second run: the first streams quicker, its pace is not what it checks)."""
    for notebook in execute_twice("01-quickstart", folder, first_stream_delay=0.01):
        out = everything(notebook)
        assert "Done: I dropped stg_2023" in out
        assert "Completed at step 3" in out
        (agent_cell,) = [c for c in notebook.cells if c.source.startswith("%%agent")]
        assert "application/vnd.jupyter.widget-view+json" in agent_cell.outputs[0]["data"]
    store = nd.open_store(f"sqlite:///{folder}/.nbdurable/runs.db")
    try:
        runs = ins.runs(store)
        assert runs["status"].tolist() == ["completed", "completed"]
        for run_id in runs.index:
            assert ins.history(store, run_id)["status"].tolist() == [
                "running",
                "running",
                "suspended",
                "completed",
            ]
        events = ins.events(store, runs.index[-1])
        answer = events[(events["type"] == "model_delta") & (events["step_index"] == 3)]
        streamed = answer["created_at"].max() - answer["created_at"].min()
        assert streamed.total_seconds() >= 5.0, streamed
    finally:
        store.close()


def test_quickstart_run_all_twice_without_a_restart(folder: Path) -> None:
    """Run All, then Run All again in the same kernel: the agent's cell re-registers
    the unchanged agent, the %%agent cell starts a second run (not at a watchable pace:
    the test above checks that)."""
    notebook = run_all_twice_in_one_kernel("01-quickstart", folder, stream_delay=0.01)
    assert "Done: I dropped stg_2023" in everything(notebook)
    store = nd.open_store(f"sqlite:///{folder}/.nbdurable/runs.db")
    try:
        assert ins.runs(store)["status"].tolist() == ["completed", "completed"]
    finally:
        store.close()


def _quickstart_namespace() -> dict[str, Any]:
    """The quickstart's tools, model and agent: its code cells up to the agent, run here."""
    import nbformat

    notebook = nbformat.read(NOTEBOOKS / "01-quickstart.ipynb", as_version=4)
    namespace: dict[str, Any] = {}
    for cell in notebook.cells:
        if cell.cell_type != "code" or cell.source.startswith("%%"):
            continue
        code = "\n".join(line for line in cell.source.splitlines() if not line.startswith("%"))
        exec(compile(code, "01-quickstart", "exec"), namespace)
        if "janitor" in namespace:
            return namespace
    raise AssertionError("the quickstart defines no janitor")


@pytest.mark.parametrize(
    ("approve", "reason", "said"),
    [
        (True, None, "Done: I dropped stg_2023, which was empty"),
        (False, "Keep it for the audit.", "Denied (Keep it for the audit.), so I kept stg_2023"),
        (False, None, "Denied (Denied by user.), so I kept stg_2023"),
    ],
)
async def test_the_quickstart_model_says_what_the_verdict_made_it_do(
    approve: bool, reason: str | None, said: str
) -> None:
    """What to try next: Deny with a reason and the model says it kept the table."""
    janitor = _quickstart_namespace()["janitor"]
    janitor.model.stream_delay = 0
    async with await nd.DurableRuntime.open(
        store=nd.open_store("memory://"), agents=[janitor]
    ) as rt:
        run = await rt.submit("janitor", "Clean up the stale staging tables in the warehouse.")
        await run.wait("waiting_approval", timeout=30)
        if approve:
            await run.approve()
        else:
            await run.deny(reason=reason)
        assert (await run.result()).text.startswith(said)


def test_approvals_and_signing_denies_a_forged_token(folder: Path) -> None:
    _, notebook = execute_twice("02-approvals-and-signing", folder)
    out = everything(notebook)
    assert "stg_2023: completed -> Tool said: dropped stg_2023" in out
    assert "orders: completed -> Tool said: Denied by user." in out
    assert "Tool said: Approval token missing, invalid, expired, or bound to another run." in out
    assert "agent_path: ('dba',)" in out
    assert "The DBA reports: Tool said: dropped stg_2023" in out
    assert "invalid token | waiting_approval" in out
    assert "http://127.0.0.1:8000/approve/" in out and "?token=v1." in out
    assert "approved | Tool said: dropped stg_2023" in out
    assert "archive_table {'name': 'stg_2023'} | editable: True" in out
    assert "form fields: ['name', 'keep_days']" in out
    assert "InvalidEditError | waiting_approval" in out
    assert "edited to archive_table(name='stg_2023', keep_days=7)" in out
    assert "Tool said: archived stg_2023, kept 7 days" in out
    assert "Tool said: stg_2023 was archived last week: nothing to do" in out
    assert "mode 0o600" in out


def test_crash_and_resume_survives_a_restart_and_a_killed_worker(folder: Path) -> None:
    for notebook in execute_twice("03-crash-and-resume", folder):
        out = everything(notebook)
        assert "0 checkpoint_saved" in out
        assert "pending; it goes on in this kernel" in out
        assert "worker killed during step 1 | run state: running" in out
        # a dead worker on this host is seen at once; elsewhere its lease expires
        assert "is gone: the lease expired" in out or "is gone: its process no longer" in out
        # explain in a notebook speaks notebook, not Python awaits
        assert "await run." not in out and "await runtime." not in out
        # what the cells printed and returned (a run widget's saved summary repeats the answer)
        said = "\n".join(
            text_of(
                {"outputs": [o for o in cell.get("outputs", []) if WIDGET not in o.get("data", {})]}
            )
            for cell in notebook.cells
            if cell.cell_type == "code"
        )
        assert said.count("Done: dropped stg_2023 and kept stg_2024") == 2
    assert not (folder / ".nbdurable" / "runs.db").exists()  # its own store only
    store = nd.open_store(f"sqlite:///{folder}/.nbdurable/03-crash.db")
    try:
        runs = ins.runs(store)
        assert runs["status"].tolist() == ["completed"] * 4
        assert runs["steps"].tolist() == [4] * 4
    finally:
        store.close()


def test_time_travel_forks_diffs_and_plots(folder: Path) -> None:
    _, notebook = execute_twice("04-time-travel", folder)
    out = everything(notebook)
    assert "-3days -> stg_2023 was read 3 days ago, so I am keeping it." in out
    assert "Understood: Keep every table this week." in out
    assert 'last_read_days": 410' in out and 'last_read_days": 3' in out
    code = [c for c in notebook.cells if c.cell_type == "code"]
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2
    assert "approval_wait" in out and "model_call" in out  # the spans table


def test_debug_a_stuck_run_explains_and_unsticks_every_kind(folder: Path) -> None:
    for notebook in execute_twice("05-debug-a-stuck-run", folder):
        out = everything(notebook)
        for said in (
            "Waiting for 1 approval(s) at step 2.",
            "Queued behind run-",
            "Needs a human: tool 'send_report'",
            "The model call failed; attempt 2 starts at",
            "Failed: model_retries_exhausted.",
        ):
            assert said in out
        assert "is gone: the lease expired" in out or "is gone: its process no longer" in out
        # explain in a notebook speaks notebook: magics and buttons, not Python awaits
        assert "await run." not in out and "await runtime." not in out
        assert "%durable approve" in out and "Approve / Deny on its card" in out
        pages = [
            o["data"]["text/html"]
            for cell in notebook.cells
            for o in cell.get("outputs", [])
            if "nbdurable-explain" in o.get("data", {}).get("text/html", "")
        ]
        # JupyterLab breaks <pre> text mid-word unless told otherwise
        assert len(pages) == 6 and all("word-break: normal" in page for page in pages)
    store = nd.open_store(f"sqlite:///{folder}/.nbdurable/05-debug.db")
    try:
        runs = ins.runs(store)
        assert len(runs) == 12 and set(runs["status"]) == {"completed"}
    finally:
        store.close()


def _processes_running(script: str, cwd: Path) -> list[int]:
    """Ids of live processes started in ``cwd`` whose command line names ``script``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
                if script in cmdline and Path(os.readlink(entry / "cwd")) == cwd:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_08_bring_your_own_stack_runs_foreign_parts_durably_and_reaps_the_mcp_server(
    folder: Path,
) -> None:
    """A Pydantic AI model, a LangChain tool and an MCP server's gated tool in one run,
    executed twice; the MCP server's process is gone after each execution."""
    pytest.importorskip("pydantic_ai")
    pytest.importorskip("langchain_core")
    pytest.importorskip("mcp")
    for notebook in execute_twice("08-bring-your-own-stack", folder):
        out = everything(notebook)
        assert "{'list_tables': (False, 'safe'), 'drop_table': (True, 'manual')}" in out
        assert "('function', 'function:janitor_turn:')" in out
        assert "waits for: drop_table {'name': 'stg_2023'}" in out
        assert "stg_2023 was empty and unread: dropped stg_2023." in out
    assert not _processes_running("demo_mcp_server.py", folder)
    store = nd.open_store(f"sqlite:///{folder}/.nbdurable/08-byos.db")
    try:
        runs = ins.runs(store)
        assert runs["status"].tolist() == ["completed", "completed"]
        for run_id in runs.index:
            history = ins.history(store, run_id)
            assert history["tool_calls"].tolist() == ["list_tables", "last_read", "drop_table", ""]
            assert history["status"].tolist() == ["running", "running", "suspended", "completed"]
    finally:
        store.close()


def test_09_approvals_for_a_team_records_who_decided_each_call_and_how(folder: Path) -> None:
    """Three runs wait at once: Ana approves one with the magic, Lee one through the
    bridge with his named token, a grant covers the third's three calls."""
    pytest.importorskip("fastapi")
    for notebook in execute_twice("09-approvals-for-a-team", folder):
        out = everything(notebook)
        assert "Lee sees 2 calls waiting" in out
        assert "approved by lee, " in out
        assert "Dropped stg_2023, stg_2024, stg_2025." in out
    store = nd.open_store(f"sqlite:///{folder}/.nbdurable/09-team.db")
    try:
        frame = ins.approvals(store, status="approved")
        assert len(frame) == 10  # five calls a round, two rounds
        sources = frame.groupby(["decided_by", "authenticated", "via"]).size().to_dict()
        assert sources == {
            ("ana", False, "grant"): 6,
            ("ana", False, "magic"): 2,
            ("lee", True, "http"): 2,
        }
    finally:
        store.close()
