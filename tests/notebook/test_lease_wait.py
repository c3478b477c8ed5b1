"""Whether a run waits for another runtime's lease, as the magics and the widget say."""

from __future__ import annotations

from nbdurable.notebook._lease import lease_wait
from nbdurable.runs import RuntimeRun, lease_holder

NOW = 1_800_000_000_000


def _running(owner: str | None) -> RuntimeRun:
    return RuntimeRun(
        run_id="r1",
        agent_id="a",
        agent_version="1",
        session_id="s",
        prompt="hi",
        state="running",
        created_at=NOW,
        updated_at=NOW,
        lease_owner=owner,
        lease_expires_at=NOW + 30_000,
    )


def test_a_run_this_runtime_holds_waits_for_nobody() -> None:
    """The lease a runtime holds carries its process: it is its own, not a previous owner's."""
    assert lease_wait(_running(lease_holder("runtime-me")), "runtime-me", NOW) is None
    assert lease_wait(_running("runtime-me"), "runtime-me", NOW) is None


def test_a_run_another_runtime_holds_waits_for_its_lease() -> None:
    wait = lease_wait(_running(lease_holder("runtime-gone")), "runtime-me", NOW)
    assert wait is not None and wait.owner.startswith("runtime-gone@")
    assert wait.seconds_left(NOW) == 30
    assert lease_wait(_running(lease_holder("runtime-gone")), "runtime-me", NOW + 30_000) is None
