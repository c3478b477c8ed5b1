"""Standing approvals (grants): a signed rule that approves a tool's calls in one run.

A grant approves every gated call of one tool in one run until it expires,
optionally only when the call's arguments match a rule, and only for the calls
of one agent path (the top-level agent's by default; a sub-agent's calls only
when the grant names that sub-agent's path). It is a token signed with
:meth:`~nbdurable.durable._signer.ApprovalSigner.sign_payload` (``kind:
"grant"``, so it can never pass for an approval request's token), bound to the
run, the tool, the rule, the agent path and the expiry. The run record keeps
the tokens and the ids of revoked grants (:attr:`RuntimeRun.grants`); every
gated call verifies them again (signature, run, tool, rule, agent path,
expiry, not revoked), so a forged or edited token in the record covers nothing.

Argument rules (``match``), one entry per argument name; every entry must hold:

- ``"stg_*"``: a plain string is a glob (``*``, ``?``, ``[...]``, case
  sensitive, :func:`fnmatch.fnmatchcase`), matched against string arguments only;
- ``{"glob": "stg_*"}``: the same, spelled out;
- ``{"prefix": "stg_"}``: a string argument starting with the prefix;
- ``{"equals": value}``: the argument equals the JSON value exactly (any type);
- a number, boolean or null: shorthand for ``{"equals": ...}``.

An argument the call does not pass never matches. No ``match`` (or an empty
one) covers every call of the tool.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigurationError
from ..durable._signer import ApprovalSigner
from ._patch import RunPatch
from ._record import RuntimeRun

__all__ = [
    "Grant",
    "RunGrants",
    "normalize_match",
    "rule_matches",
    "sign_grant",
    "verify_grant",
    "with_grant_change",
]

GRANT_KIND = "grant"
"""The ``kind`` of a grant token's signed payload."""
_RULES = ("glob", "prefix", "equals")


def normalize_match(match: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``match`` in its spelled-out form: ``{argument: {"glob"|"prefix"|"equals": value}}``.

    Raises:
        ConfigurationError: Not a mapping of argument names to rules, or a rule
            that is not one of the documented forms.
    """
    if match is None:
        return {}
    if not isinstance(match, Mapping):
        raise ConfigurationError(f"a grant's match must be a dict of argument rules, not {match!r}")
    rules: dict[str, dict[str, Any]] = {}
    for name, rule in match.items():
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a grant's match names arguments by string, not {name!r}")
        rules[name] = _rule(name, rule)
    try:
        json.dumps(rules, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"a grant's match must be JSON: {exc}") from None
    return rules


def _rule(name: str, rule: Any) -> dict[str, Any]:
    if isinstance(rule, str):
        return {"glob": rule}
    if rule is None or isinstance(rule, bool | int | float):
        return {"equals": rule}
    if isinstance(rule, Mapping) and len(rule) == 1:
        (kind, value), *_ = rule.items()
        if kind == "equals":
            return {"equals": value}
        if kind in ("glob", "prefix") and isinstance(value, str):
            return {kind: value}
    raise ConfigurationError(
        f"the grant rule for argument {name!r} must be a glob string, {{'glob': str}}, "
        f"{{'prefix': str}} or {{'equals': value}}, not {rule!r}"
    )


def rule_matches(rule: Mapping[str, Any], value: Any) -> bool:
    """Whether one argument's ``value`` satisfies one normalized rule."""
    if "equals" in rule:
        return _same_json(value, rule["equals"])
    if not isinstance(value, str):
        return False
    if "prefix" in rule:
        return isinstance(rule["prefix"], str) and value.startswith(rule["prefix"])
    if "glob" in rule:
        return isinstance(rule["glob"], str) and fnmatch.fnmatchcase(value, rule["glob"])
    return False


def _same_json(value: Any, expected: Any) -> bool:
    """Equal as JSON values: ``true`` is not ``1``, but ``1`` is ``1.0``."""
    numbers = (int, float)
    if (
        isinstance(value, numbers)
        and isinstance(expected, numbers)
        and not isinstance(value, bool)
        and not isinstance(expected, bool)
    ):
        return bool(value == expected)
    try:
        return json.dumps(value, sort_keys=True) == json.dumps(expected, sort_keys=True)
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class Grant:
    """A standing approval, as signed (see the module docstring for its rules).

    Attributes:
        grant_id: Its id (``revoke`` names it; a covered call's verdict carries it).
        run_id: The run it belongs to.
        tool: The tool whose calls it approves.
        expires_at: When it stops covering (epoch ms).
        match: The argument rules, spelled out (empty: every call of the tool).
        agent_path: The agent whose calls it covers (empty: the run's own agent).
        granted_by: Who granted it (a claimed name, as for any verdict).
        via: How it was given: ``api``, ``magic``, ``widget``, ``cli``, ``http``.
        issued_at: When it was signed (epoch ms).
        token: The signed token the run record keeps.
    """

    grant_id: str
    run_id: str
    tool: str
    expires_at: int
    match: dict[str, dict[str, Any]] = field(default_factory=dict)
    agent_path: tuple[str, ...] = ()
    granted_by: str | None = None
    via: str | None = None
    issued_at: int = 0
    token: str = field(default="", repr=False)

    @property
    def id(self) -> str:
        """The grant's id (``grant_id``)."""
        return self.grant_id

    def matches(self, arguments: Mapping[str, Any]) -> bool:
        """Whether a call's arguments satisfy every rule."""
        return all(
            name in arguments and rule_matches(rule, arguments[name])
            for name, rule in self.match.items()
        )

    def covers(
        self, tool: str, arguments: Mapping[str, Any], agent_path: Sequence[str], now: int
    ) -> bool:
        """Whether it approves this call at ``now`` (revocation aside: see :class:`RunGrants`)."""
        return (
            tool == self.tool
            and tuple(agent_path) == self.agent_path
            and now < self.expires_at
            and self.matches(arguments)
        )

    def event_payload(self) -> dict[str, Any]:
        """What the ``grant_added`` event says of it (never the token)."""
        return {
            "grant_id": self.grant_id,
            "tool": self.tool,
            "expires_at": self.expires_at,
            "match": self.match,
            "agent_path": list(self.agent_path),
            "granted_by": self.granted_by,
            "via": self.via,
        }


def sign_grant(
    signer: ApprovalSigner,
    *,
    grant_id: str,
    run_id: str,
    tool: str,
    expires_at: int,
    match: Mapping[str, Any] | None = None,
    agent_path: Sequence[str] = (),
    granted_by: str | None = None,
    via: str | None = None,
) -> Grant:
    """A new grant, signed.

    Raises:
        ConfigurationError: An invalid rule, tool or agent path.
    """
    if not isinstance(tool, str) or not tool:
        raise ConfigurationError(f"a grant names a tool, not {tool!r}")
    path = tuple(agent_path)
    if not all(isinstance(p, str) and p for p in path):
        raise ConfigurationError(f"a grant's agent_path is a sequence of names, not {agent_path!r}")
    rules = normalize_match(match)
    token = signer.sign_payload(
        {
            "kind": GRANT_KIND,
            "grant_id": grant_id,
            "run_id": run_id,
            "tool": tool,
            "expires_at": int(expires_at),
            "match": rules,
            "agent_path": list(path),
            "granted_by": granted_by,
            "via": via,
        }
    )
    grant = verify_grant(signer, token, run_id=run_id)
    assert grant is not None  # just signed by the same key
    return grant


def verify_grant(signer: ApprovalSigner, token: object, *, run_id: str) -> Grant | None:
    """The grant ``token`` signs for ``run_id``, or None (forged, garbled, another run's).

    Expiry and revocation are not judged here: :meth:`Grant.covers` and
    :class:`RunGrants` do, at each call. Never raises.
    """
    payload = signer.verify(token)
    if payload is None or payload.get("kind") != GRANT_KIND or payload.get("run_id") != run_id:
        return None
    try:
        grant_id, tool, expires_at = payload["grant_id"], payload["tool"], payload["expires_at"]
        path, by, via = payload.get("agent_path", []), payload.get("granted_by"), payload.get("via")
        if not (isinstance(grant_id, str) and isinstance(tool, str)):
            return None
        if not isinstance(expires_at, int) or isinstance(expires_at, bool):
            return None
        if not isinstance(path, list) or not all(isinstance(p, str) for p in path):
            return None
        if not (by is None or isinstance(by, str)) or not (via is None or isinstance(via, str)):
            return None
        rules = normalize_match(payload.get("match"))
    except (KeyError, ConfigurationError):
        return None
    return Grant(
        grant_id=grant_id,
        run_id=run_id,
        tool=tool,
        expires_at=expires_at,
        match=rules,
        agent_path=tuple(path),
        granted_by=by,
        via=via,
        issued_at=int(payload["issued_at"]),
        token=str(token),
    )


@dataclass(frozen=True)
class RunGrants:
    """The grants a run record keeps: signed tokens, and the ids of revoked grants.

    Stored as :attr:`RuntimeRun.grants`, ``{"tokens": [...], "revoked": [...]}``.
    """

    tokens: tuple[str, ...] = ()
    revoked: frozenset[str] = frozenset()

    @classmethod
    def of(cls, stored: Mapping[str, Any] | None) -> RunGrants:
        """The grants of a record's ``grants`` field (None: none)."""
        if not stored:
            return cls()
        tokens = stored.get("tokens") or ()
        revoked = stored.get("revoked") or ()
        return cls(
            tuple(t for t in tokens if isinstance(t, str)),
            frozenset(r for r in revoked if isinstance(r, str)),
        )

    def stored(self) -> dict[str, list[str]]:
        """The record's form."""
        return {"tokens": list(self.tokens), "revoked": sorted(self.revoked)}

    def verified(self, signer: ApprovalSigner, run_id: str) -> list[Grant]:
        """Every grant whose token verifies for ``run_id``, revoked ones included."""
        grants = (verify_grant(signer, token, run_id=run_id) for token in self.tokens)
        return [g for g in grants if g is not None]

    def covering(
        self,
        signer: ApprovalSigner,
        *,
        run_id: str,
        tool: str,
        arguments: Mapping[str, Any],
        agent_path: Sequence[str],
        now: int,
    ) -> Grant | None:
        """The first grant that approves this call now, verified; None when none does."""
        if not self.tokens:
            return None
        for grant in self.verified(signer, run_id):
            if grant.grant_id not in self.revoked and grant.covers(
                tool, arguments, agent_path, now
            ):
                return grant
        return None


def with_grant_change(
    run: RuntimeRun, *, add: str | None = None, revoke: str | None = None, now: int
) -> RuntimeRun | None:
    """``run`` with a grant token added or a grant id revoked; None when nothing changes.

    A pure function; stores apply it inside the transaction that writes its
    result, so concurrent grants and revocations from any processes all land.
    """
    current = RunGrants.of(run.grants)
    tokens, revoked = current.tokens, current.revoked
    if add is not None and add not in tokens:
        tokens = (*tokens, add)
    if revoke is not None:
        revoked = revoked | {revoke}
    changed = RunGrants(tokens, revoked)
    if changed == current:
        return None
    return RunPatch(grants=changed.stored(), updated_at=now).apply(run)
