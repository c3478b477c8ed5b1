"""The fingerprint of an agent definition: what decides a run's behaviour, hashed in parts.

A run records the fingerprint of the definition it was submitted under; a
runtime claims it only when its own registration of that ``(id, version)``
accepts it (:class:`Definition`). The fingerprint is deterministic across
processes and hosts (:mod:`nbdurable.runtime._canonical` says how values and
callables count), and kept in named parts (``model``, ``instructions``,
``output``, ``recovery``, ``retry_if``, one ``tool:NAME`` per tool; see
:mod:`nbdurable.durable._definitions`), so a run that waits for a matching
definition says which part differs.

Covered: the model's class and id and the settings that shape its answers (a
:class:`~nbdurable.ScriptedModel`'s script and mode; ``options``,
``extra_body``, ``temperature``, ``max_tokens``... of other models, or what a
model's ``fingerprint_settings()`` returns), the tools' names, descriptions,
JSON schemas, approval gates and client-tool flag (a sub-agent tool with its
own model, tools, instructions and step budget), the instructions, the output
type's JSON schema, the tool recovery policies and ``retry_if``.

Excluded: what a run captures at its submission and executes with, whatever a
later registration says (``stream``, ``max_steps``, ``model_retry``, who may
approve; within one runtime a changed one under the same version is still a
registration conflict); the current values of state a callable keeps (a call
counter it closes over counts by its type); what varies by host or is secret
(base URLs, API keys, headers, timeouts, clients, prices, a scripted model's
``stream_delay`` and ``fail_on``); ``max_tool_concurrency`` and the bodies of
tool functions.

Runs recorded before the fingerprint had parts carry one digest of the whole
definition under the previous scheme (which also covered ``stream`` and
``max_steps``, and closure values as they were): a :class:`Definition`
recomputes that scheme for them (:func:`legacy_fingerprint`, with the run's own
``stream`` and ``max_steps``), so an unchanged definition still serves them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..durable._definitions import compose, parts_of, tool_part
from ..loop._output import OutputSpec
from ..loop._subagent import AgentTool
from ..models._scripted import ScriptedModel
from ..runs import RuntimeRun
from ..tools import Tool, normalize_tools
from ._canonical import callable_identity, canonical

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = [
    "MODEL_SETTINGS",
    "Definition",
    "agent_fingerprint",
    "definition_parts",
    "legacy_fingerprint",
    "model_settings",
]

DIGEST_CHARS = 12
"""Hex digits kept of each part's sha256 (48 bits: parts are compared within one
``(id, version)``, against accidental change, not forgery)."""

MODEL_SETTINGS: tuple[str, ...] = (
    "model_id",
    "model_name",
    "options",
    "settings",
    "model_settings",
    "extra_body",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "stop_sequences",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "presence_penalty",
    "frequency_penalty",
    "reasoning_effort",
    "structured_output",
)
"""Attributes of a model (without ``fingerprint_settings()``) that shape its answers."""


def agent_fingerprint(agent: Agent) -> str:
    """The fingerprint of ``agent``'s definition, in parts (``v2 model=... tool:NAME=...``).

    Equal for equal definitions in any process (see the module's docstring for
    what it covers and excludes).
    """
    return compose({name: _digest(data) for name, data in definition_parts(agent).items()})


def definition_parts(agent: Agent) -> dict[str, Any]:
    """What each part of ``agent``'s fingerprint covers, as JSON data, by part name."""
    output = OutputSpec.of(agent.output_type)
    parts: dict[str, Any] = {
        "model": model_settings(agent.model),
        "instructions": agent.instructions,
        "output": output.schema if output is not None else None,
        "recovery": dict(sorted(agent.effective_recovery().items())),
        "retry_if": None if agent.retry_if is None else callable_identity(agent.retry_if),
    }
    for name, tool in sorted(agent.tool_map.items()):
        parts[tool_part(name)] = _tool(tool)
    return parts


def legacy_fingerprint(agent: Agent, *, stream: bool, max_steps: int) -> str:
    """``agent``'s fingerprint under the previous scheme: one sha256 hex digest.

    As a run submitted with ``stream`` and ``max_steps`` recorded it (that
    scheme covered both, and closure values as they were).
    """
    output = OutputSpec.of(agent.output_type)
    retry_if = agent.retry_if
    data = {
        "format": 1,
        "id": agent.id,
        "version": agent.version,
        "model": model_settings(agent.model, legacy=True),
        "tools": [_tool(agent.tool_map[name], legacy=True) for name in sorted(agent.tool_map)],
        "instructions": agent.instructions,
        "stream": stream,
        "tool_recovery": dict(sorted(agent.effective_recovery().items())),
        "retry_if": None if retry_if is None else callable_identity(retry_if, legacy=True),
        "max_steps": max_steps,
        "output": output.schema if output is not None else None,
    }
    text = json.dumps(data, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def model_settings(model: Any, *, legacy: bool = False) -> dict[str, Any]:
    """What of ``model`` shapes its answers, as JSON data (no host, key, timeout or client)."""
    data: dict[str, Any] = {"class": type(model).__qualname__}
    if isinstance(model, ScriptedModel):
        data["model_id"] = model.model_id
        data["mode"] = model.mode
        data["script"] = [canonical(entry, legacy=legacy) for entry in model.turns]
        return data
    own = getattr(model, "fingerprint_settings", None)
    if callable(own):
        data["settings"] = canonical(own(), legacy=legacy)
        return data
    for name in MODEL_SETTINGS:
        value = getattr(model, name, None)
        if value is not None and not callable(value):
            data[name] = canonical(value, legacy=legacy)
    return data


class Definition:
    """A runtime's registration of one ``(id, version)``, as claims compare it with runs.

    It accepts a run whose fingerprint is its own, or, for a run recorded under
    the previous scheme, that scheme's digest of this definition with the run's
    own ``stream`` and ``max_steps`` (computed at registration with this
    definition's own; with a run's other ``stream`` or ``max_steps``, when first
    asked, then kept).
    (:class:`~nbdurable.durable._definitions.ServedDefinition`.)
    """

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._fingerprint = agent_fingerprint(agent)
        self._legacy: dict[tuple[bool, int], str] = {}
        self._legacy_of(bool(agent.stream), agent.max_steps)  # closures as registered

    def __repr__(self) -> str:
        return f"Definition({self.agent.id!r}, version={self.agent.version!r})"

    @property
    def fingerprint(self) -> str:
        """Its fingerprint, in parts."""
        return self._fingerprint

    @property
    def legacy(self) -> str:
        """Its digest under the previous scheme, with its own ``stream`` and ``max_steps``."""
        return self._legacy_of(bool(self.agent.stream), self.agent.max_steps)

    def accepts(self, run: RuntimeRun) -> bool:
        """Whether ``run`` was submitted under this definition (its fingerprint, any scheme)."""
        recorded = run.fingerprint
        if recorded is None or recorded == self._fingerprint:
            return True
        if parts_of(recorded) is not None:
            return False
        return recorded in (
            self._legacy_of(run.stream, run.max_steps),
            self._legacy_of(run.stream, self.agent.max_steps),  # a max_steps given at submit
        )

    def _legacy_of(self, stream: bool, max_steps: int) -> str:
        key = (bool(stream), max_steps)
        found = self._legacy.get(key)
        if found is None:
            found = self._legacy[key] = legacy_fingerprint(
                self.agent, stream=key[0], max_steps=max_steps
            )
        return found


def _tool(tool: Tool, *, legacy: bool = False) -> dict[str, Any]:
    gate = tool.needs_approval
    entry: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "parameters": canonical(tool.parameters, legacy=legacy),
        "client": tool.is_client_tool,
        "needs_approval": (
            gate if isinstance(gate, bool) else callable_identity(gate, legacy=legacy)
        ),
    }
    if tool.allow_edit:  # only when set: definitions from before it keep their fingerprints
        entry["allow_edit"] = True
    if isinstance(tool, AgentTool):
        tools: Mapping[str, Tool] = normalize_tools(tool.tools)
        entry["agent"] = {
            "model": model_settings(tool.model, legacy=legacy) if tool.model is not None else None,
            "tools": [_tool(tools[name], legacy=legacy) for name in sorted(tools)],
            "instructions": tool.instructions,
            "max_steps": tool.max_steps,
        }
    return entry


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]
