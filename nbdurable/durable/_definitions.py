"""Definition fingerprints in named parts, and what two of them differ in.

A run records the fingerprint of the agent definition it was submitted under
(:attr:`RuntimeRun.fingerprint`); a runtime executes it only when its own
registration of that ``(id, version)`` has the same one. The fingerprint is
kept in named parts, each the digest of one aspect of the definition, so a run
that waits for a matching definition can say which aspect differs::

    v2 model=3f0c9a1be27d instructions=… output=… recovery=… retry_if=… tool:sweep=…

Parts: ``model``, ``instructions``, ``output`` (the output schema),
``recovery`` (the tools' recovery policies), ``retry_if``, and one
``tool:NAME`` per tool (its name, description, schema, approval gate; a
tool's name is percent-quoted). Two fingerprints are equal exactly when all
their parts are. What each part covers is computed above this layer
(``nbdurable.runtime._fingerprint``); this module only composes, reads and
compares them, so stores and engines can explain a mismatch without the agent.

A fingerprint without the ``v2`` prefix (a 64-digit hex digest) was recorded
under the previous scheme, one digest of the whole definition: it has no parts
(:func:`parts_of` is None) and only a runtime that recomputes that scheme can
match it (:class:`ServedDefinition`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote, unquote

if TYPE_CHECKING:
    from ..runs import RuntimeRun

__all__ = [
    "FORMAT",
    "PARTS",
    "TOOL",
    "ServedDefinition",
    "compose",
    "difference",
    "parts_of",
    "tool_part",
]

FORMAT = "v2"
"""The prefix of a fingerprint in parts (bumped when what a part covers changes)."""

PARTS: tuple[str, ...] = ("model", "instructions", "output", "recovery", "retry_if")
"""The parts every fingerprint has, in order; then one ``tool:NAME`` per tool, by name."""

TOOL = "tool:"
"""The prefix of a tool's part."""

_LABELS = {
    "model": "model",
    "instructions": "instructions",
    "output": "output schema",
    "recovery": "tool recovery",
    "retry_if": "retry_if",
}


class ServedDefinition(Protocol):
    """A runtime's registration of one ``(id, version)``, as claims compare it with runs."""

    @property
    def fingerprint(self) -> str:
        """Its fingerprint (the current scheme, in parts)."""
        ...

    def accepts(self, run: RuntimeRun) -> bool:
        """Whether ``run`` was submitted under this definition (its fingerprint, any scheme)."""
        ...


def tool_part(name: str) -> str:
    """The part name of the tool ``name``."""
    return TOOL + quote(name, safe="")


def compose(parts: Mapping[str, str]) -> str:
    """The fingerprint of ``parts`` (part name -> digest): :data:`PARTS` first, tools sorted."""
    fixed = [name for name in PARTS if name in parts]
    tools = sorted(name for name in parts if name not in PARTS)
    return " ".join([FORMAT, *(f"{name}={parts[name]}" for name in fixed + tools)])


def parts_of(fingerprint: str | None) -> dict[str, str] | None:
    """The parts of ``fingerprint`` (name -> digest), or None for one of the previous scheme."""
    if fingerprint is None:
        return None
    head, _, rest = fingerprint.partition(" ")
    if head != FORMAT:
        return None
    parts: dict[str, str] = {}
    for item in rest.split():
        name, _, digest = item.partition("=")
        parts[name] = digest
    return parts


def difference(submitted: str | None, served: str | None) -> str | None:
    """What the definition fingerprinted ``served`` differs in from ``submitted``, in words.

    ``differs in its model and tools (sweep changed, vacuum added)``; None when
    they are equal or either is unknown. A ``submitted`` fingerprint of the
    previous scheme has no parts to compare: the text says so.
    """
    if submitted is None or served is None or submitted == served:
        return None
    mine = parts_of(submitted)
    theirs = parts_of(served)
    if mine is None:
        return "was submitted under an older fingerprint, whose parts were not recorded"
    if theirs is None:
        return "differs (its runtime fingerprints definitions under an older scheme)"
    items = [_LABELS[name] for name in PARTS if mine.get(name) != theirs.get(name)]
    tools = _tool_changes(mine, theirs)
    if tools:
        items.append(f"tools ({', '.join(tools)})")
    if not items:
        return "differs"
    listed = items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
    return f"differs in its {listed}"


def _tool_changes(submitted: Mapping[str, str], served: Mapping[str, str]) -> list[str]:
    names = sorted({n for n in [*submitted, *served] if n.startswith(TOOL)})
    changes = []
    for name in names:
        tool = unquote(name[len(TOOL) :])
        if name not in served:
            changes.append(f"{tool} missing")
        elif name not in submitted:
            changes.append(f"{tool} added")
        elif submitted[name] != served[name]:
            changes.append(f"{tool} changed")
    return changes
