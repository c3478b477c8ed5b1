"""Which MCP tools need approval and how they recover: annotations, trust, explicit settings.

The MCP specification calls tool annotations untrusted unless they come from a
trusted server. So by default every tool of a server needs approval and has
``manual`` recovery (the spec's defaults: not read-only, destructive). For a
server marked trusted:

==========================================  ========  ============
annotations                                 approval  recovery
==========================================  ========  ============
``readOnlyHint``                            no        ``safe``
``destructiveHint`` true or unset           yes       ``manual``
``destructiveHint`` false, ``idempotent``   no        ``idempotent``
``destructiveHint`` false                   no        ``manual``
==========================================  ========  ============

An explicit setting (``approval=`` or ``recovery=`` of ``server.tools()``, by
exact name or glob pattern) always wins; an exact name beats a pattern, and
among patterns the first that matches wins.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from .._errors import ConfigurationError
from ..tools import RECOVERY_POLICIES, NeedsApproval

__all__ = ["annotated_policy", "check_settings", "pick", "selected"]

V = TypeVar("V")
_GLOB_CHARS = frozenset("*?[")


def is_pattern(key: str) -> bool:
    """Whether a setting's key is a glob pattern rather than a tool name."""
    return any(ch in _GLOB_CHARS for ch in key)


def pick(settings: Mapping[str, V] | None, name: str) -> tuple[bool, V | None]:
    """The setting for tool ``name``: ``(found, value)``."""
    if not settings:
        return False, None
    if name in settings:
        return True, settings[name]
    for key, value in settings.items():
        if is_pattern(key) and fnmatch.fnmatchcase(name, key):
            return True, value
    return False, None


def selected(include: str | Sequence[str] | None, name: str) -> bool:
    """Whether ``include`` (names or patterns; None keeps all) keeps tool ``name``."""
    if include is None:
        return True
    keys = [include] if isinstance(include, str) else list(include)
    return any(fnmatch.fnmatchcase(name, key) if is_pattern(key) else name == key for key in keys)


def check_settings(
    names: Iterable[str],
    *,
    include: str | Sequence[str] | None,
    approval: Mapping[str, NeedsApproval] | None,
    recovery: Mapping[str, str] | None,
    server: str,
    allow_edit: Mapping[str, bool] | None = None,
) -> None:
    """Refuse settings that name a tool the server does not list, or an unknown policy.

    Raises:
        ConfigurationError: An exact name matches no tool (patterns may match
            none), or a recovery policy is not safe/idempotent/manual.
    """
    known = set(names)
    listed = ", ".join(sorted(known)) or "none"
    keys: list[tuple[str, str]] = []
    if include is not None:
        keys += [("include", k) for k in ([include] if isinstance(include, str) else include)]
    keys += [("approval", k) for k in approval or {}]
    keys += [("recovery", k) for k in recovery or {}]
    keys += [("allow_edit", k) for k in allow_edit or {}]
    for option, key in keys:
        if not isinstance(key, str):
            raise ConfigurationError(f"{option}= takes tool names or patterns, not {key!r}")
        if not is_pattern(key) and key not in known:
            raise ConfigurationError(
                f"{option}= names {key!r}, which {server} does not list (its tools: {listed})"
            )
    for key, policy in (recovery or {}).items():
        if policy not in RECOVERY_POLICIES:
            raise ConfigurationError(
                f"recovery= gives {key!r} the policy {policy!r}: use 'safe', 'idempotent' "
                "or 'manual'"
            )
    for key, gate in (approval or {}).items():
        if not isinstance(gate, bool) and not callable(gate):
            raise ConfigurationError(
                f"approval= gives {key!r} {gate!r}: use True, False or a callable on the arguments"
            )


def annotated_policy(annotations: Any, *, trusted: bool) -> tuple[bool, str]:
    """``(needs_approval, recovery)`` from a tool's MCP annotations (see the module's table)."""
    if not trusted or annotations is None:
        return True, "manual"
    if getattr(annotations, "read_only_hint", None) is True:
        return False, "safe"
    if getattr(annotations, "destructive_hint", None) is not False:
        return True, "manual"
    if getattr(annotations, "idempotent_hint", None) is True:
        return False, "idempotent"
    return False, "manual"
