"""A tool's own recovery policy (Tool.recovery): the default an agent's tool_recovery overrides."""

from __future__ import annotations

import pytest

import nbdurable as nd
from nbdurable.runtime import Agent


@nd.tool(recovery="safe")
def probe(n: int) -> int:
    """Probe something harmless."""
    return n


@nd.tool
def charge(amount: int) -> str:
    """Charge a card."""
    return f"charged {amount}"


def agent(**kwargs: object) -> Agent:
    return Agent("a", nd.ScriptedModel(["ok"]), [probe, charge], version="1", **kwargs)  # type: ignore[arg-type]


def test_the_agent_setting_wins_over_the_tools_own_then_manual() -> None:
    assert agent().recovery_of("probe") == "safe"
    assert agent().recovery_of("charge") == "manual"
    assert agent(tool_recovery={"probe": "manual"}).recovery_of("probe") == "manual"
    assert agent(tool_recovery={"charge": "idempotent"}).recovery_of("charge") == "idempotent"
    assert agent().recovery_of("unknown") == "manual"


def test_the_fingerprint_sees_the_effective_policies() -> None:
    plain = nd.tool(probe.execute)  # the same function without a policy of its own
    listed = Agent(
        "a", nd.ScriptedModel(["ok"]), [plain, charge], version="1", tool_recovery={"probe": "safe"}
    )
    assert listed.fingerprint() == agent().fingerprint()  # same behaviour, same definition
    assert agent(tool_recovery={"probe": "manual"}).fingerprint() != agent().fingerprint()
    bare = Agent("a", nd.ScriptedModel(["ok"]), [plain, charge], version="1")
    assert bare.fingerprint() != agent().fingerprint()


def test_an_unknown_policy_is_refused() -> None:
    def often() -> None:
        """Run often."""

    with pytest.raises(nd.ConfigurationError, match="recovery must be"):
        nd.tool(recovery="often")(often)
    with pytest.raises(nd.ConfigurationError, match="recovery must be"):
        nd.Tool(name="t", recovery="often")
