"""Where a runtime's approval secret comes from: every runtime on one store agrees."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.durable import _signer as signer_module


def test_runtimes_on_one_store_share_the_secret(
    store: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NBDURABLE_APPROVAL_SECRET", raising=False)
    monkeypatch.setattr(signer_module, "_HOME_KEY", tmp_path / "home" / "approval.key")
    first = nd.DurableRuntime(store=store)
    second = nd.DurableRuntime(store=store)
    request = nd.ToolApprovalRequest(approval_id="a1", tool_call_id="c1", tool_name="t")
    token = first.signer.sign(request, run_id="r")
    assert second.signer.verify(token) is not None
    if store_url.startswith("postgresql"):
        key = tmp_path / "home" / "approval.key"
        assert stat.S_IMODE(os.stat(key).st_mode) == 0o600


def test_the_environment_variable_wins(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBDURABLE_APPROVAL_SECRET", "from the environment")
    runtime = nd.DurableRuntime(store=store)
    request = nd.ToolApprovalRequest(approval_id="a1", tool_call_id="c1", tool_name="t")
    token = nd.ApprovalSigner("from the environment").sign(request)
    assert runtime.signer.verify(token) is not None
