"""``--agents module:attr`` finds a module in the working directory (issue 23).

Run for real: the ``nbdurable`` console script (which, unlike ``python -m``, puts
no folder on ``sys.path``) started from a folder holding ``mymodule.py``, with
nothing else pointing at that folder.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.cli._agents import load_agents

ROOT = Path(__file__).resolve().parents[2]

MODULE = textwrap.dedent(
    """
    import nbdurable as nd

    agents = [nd.Agent("greeter", nd.ScriptedModel(["Hello from mymodule."]), version="1")]
    """
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "mymodule.py").write_text(MODULE)
    return tmp_path


def _env() -> dict[str, str]:
    # this checkout's package, and nothing that points at the test's folder
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)}


def _console_script() -> list[str]:
    script = shutil.which("nbdurable")
    if script is None:
        pytest.skip("the nbdurable console script is not installed")
    return [script]


def test_worker_from_the_module_folder_serves_its_agents(folder: Path) -> None:
    url = f"sqlite:///{folder / 'runs.db'}"
    store = nd.open_store(url)
    try:
        client = nd.DurableRuntime(store=store, agents=load_agents_from(folder))
        run = asyncio.run(client.submit("greeter", "Hi."))
        command = [*_console_script(), "worker", "--store", url, "--agents", "mymodule:agents"]
        done = subprocess.run(
            [*command, "--exit-when-idle", "--poll-interval", "0.05"],
            cwd=folder,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "serving 1 agent(s)" in done.stdout
        assert asyncio.run(run.result()).text == "Hello from mymodule."
    finally:
        store.close()


def load_agents_from(folder: Path) -> list[nd.Agent]:
    """The same definitions, imported here by path (this process's cwd is elsewhere)."""
    sys.path.insert(0, str(folder))
    try:
        sys.modules.pop("mymodule", None)
        return load_agents("mymodule:agents")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("mymodule", None)


def test_serve_from_the_module_folder_starts(folder: Path) -> None:
    pytest.importorskip("uvicorn", reason="the server extra is not installed")
    url = f"sqlite:///{folder / 'runs.db'}"
    command = [*_console_script(), "serve", "--store", url, "--agents", "mymodule:agents"]
    command += ["--port", "0", "--token", "t0ken"]
    proc = subprocess.Popen(
        command, cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving 1 agent(s)" in line, proc.stderr.read() if proc.poll() is not None else line
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_module_found_nowhere_names_the_folders_it_looked_in(folder: Path) -> None:
    done = subprocess.run(
        [*_console_script(), "worker", "--store", "memory://", "--agents", "nosuchmodule:agents"],
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "cannot import 'nosuchmodule'" in done.stderr and str(folder) in done.stderr
