"""``stalled(record)``: an active run whose owner stopped, and the line that says so."""

from __future__ import annotations

from nbdurable.runs import RuntimeRun, lease_holder, stalled

NOW = 1_800_000_000_000


def _running(owner: str | None, expires: int | None, state: str = "running") -> RuntimeRun:
    return RuntimeRun(
        run_id="r1",
        agent_id="reporter",
        agent_version="1",
        session_id="s1",
        prompt='"hi"',
        state=state,
        lease_owner=owner,
        lease_expires_at=expires,
        created_at=NOW,
        updated_at=NOW,
    )


def test_a_live_owner_with_a_valid_lease_is_not_stalled() -> None:
    me = lease_holder("runtime-me")  # this very process: alive
    assert stalled(_running(me, NOW + 10_000), now=NOW) is None
    assert stalled(_running(None, None, state="pending"), now=NOW) is None
    assert stalled(_running(me, NOW - 1, state="waiting_approval"), now=NOW) is None


def test_an_expired_lease_of_an_owner_that_may_be_alive_says_silent() -> None:
    found = stalled(_running("worker-elsewhere", NOW - 27 * 60_000), now=NOW)
    assert found is not None and not found.gone
    assert found.text(NOW) == (
        "owner worker-elsewhere silent, lease expired 27 m ago; "
        "a runtime or worker serving reporter v1 will take it over"
    )


def test_seconds_and_hours() -> None:
    found = stalled(_running("w", NOW - 42_000, state="cancelling"), now=NOW)
    assert found is not None and "lease expired 42 s ago" in found.text(NOW)
    assert "lease expired 2 h 05 m ago" in found.text(NOW + 2 * 3_600_000 + 5 * 60_000 - 42_000)
