"""Recorded workflow histories still replay against the current workflows.

Each file in tests/temporal/histories is the history of a workflow recorded
from an earlier release (approvals, a model retry, sub-agents, graph nodes,
custom tasks, a cancellation, a call handed back and sent to its definition's queue). A workflow parked for days replays its history
on whatever worker picks it up next: if the current code would issue another
command sequence for the same history, the parked run breaks. Replay is
offline (no server): the worker's workflows, runner, data converter and
interceptors, under a worker runtime serving the agents the histories ran with.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.client import WorkflowHistory
from temporalio.worker import Interceptor, Replayer, UnsandboxedWorkflowRunner

import nbdurable as nd
from nbdurable.durable._signer import ApprovalSigner
from nbdurable.runtime import DurableRuntime
from nbdurable.temporal._registry import set_worker_runtime
from nbdurable.temporal._tasks import TaskRunWorkflow
from nbdurable.temporal._tracing import client_interceptors
from nbdurable.temporal._workflow import AgentRunWorkflow

HISTORIES = Path(__file__).resolve().parent / "histories"


def _load_agents() -> ModuleType:
    """The recorded agents, as the top-level module ``history_agents`` the worker imported.

    Module-level functions count by their importable name in an agent's
    fingerprint, so the module must have the name it had when recording.
    """
    if "history_agents" in sys.modules:
        return sys.modules["history_agents"]
    spec = importlib.util.spec_from_file_location("history_agents", HISTORIES / "history_agents.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["history_agents"] = module
    spec.loader.exec_module(module)
    return module


history_agents = _load_agents()
INDEX: dict[str, dict[str, str]] = json.loads((HISTORIES / "index.json").read_text())


def replayer() -> Replayer:
    """A replayer configured as ``nbdurable.temporal._worker.build_worker`` configures a worker.

    The worker registers both workflows, runs them unsandboxed and keeps the
    default data converter; its interceptors are the client's (tracing, when on).
    """
    return Replayer(
        workflows=[AgentRunWorkflow, TaskRunWorkflow],
        workflow_runner=UnsandboxedWorkflowRunner(),
        interceptors=[i for i in client_interceptors() if isinstance(i, Interceptor)],
    )


@pytest.fixture(autouse=True)
def worker_runtime() -> None:
    """The runtime workflow code reads its agents, signer and limits from, as in a worker."""
    runtime = DurableRuntime(
        store=nd.open_store("memory://"),
        agents=history_agents.agents,
        tasks=history_agents.tasks,
        approval_signer=ApprovalSigner(history_agents.SECRET),
    )
    set_worker_runtime(runtime)


def test_every_history_file_is_indexed_and_every_workflow_type_is_covered() -> None:
    files = {p.name for p in HISTORIES.glob("*.json")} - {"index.json"}
    assert files == set(INDEX)
    types = set()
    for name in files:
        started = json.loads((HISTORIES / name).read_text())["events"][0]
        types.add(started["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])
    assert types == {"nbdurable.AgentRun", "nbdurable.TaskRun"}


@pytest.mark.parametrize("name", sorted(INDEX))
async def test_recorded_history_replays(name: str) -> None:
    history = WorkflowHistory.from_json(INDEX[name]["workflow_id"], (HISTORIES / name).read_text())
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{INDEX[name]['shows']}: {result.replay_failure!r}"
