"""The fingerprint of an agent definition: what changes a run's behaviour, hashed.

A run records the fingerprint of the definition it was submitted under; a
runtime claims it only when its own registration of that ``(id, version)`` has
the same fingerprint. The hash is deterministic across processes and hosts: it
never depends on object identity, memory addresses or Python's randomized
``hash()``, and callables count by their compiled code, not their identity, so
re-running an unchanged notebook cell gives the same fingerprint.

Covered: the model's class and id and the settings that shape its answers (a
:class:`~nbdurable.ScriptedModel`'s script and mode; ``options``,
``extra_body``, ``temperature``, ``max_tokens``... of other models, or what a
model's ``fingerprint_settings()`` returns), the tools' names, descriptions,
JSON schemas, approval gates and client-tool flag (a sub-agent tool with its
own model, tools and instructions), the instructions, the output type's JSON
schema, the tool recovery policies, ``retry_if``, ``stream`` and ``max_steps``.

Excluded: what varies by host or is secret (base URLs, API keys, headers,
timeouts, clients, prices, a scripted model's ``stream_delay`` and
``fail_on``), ``max_tool_concurrency``, the bodies of tool functions, and
``model_retry``: a run keeps the retry policy saved at its submission whatever
a later registration says; within one runtime a changed policy under
the same version is still a registration conflict.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import sys
import types
from collections.abc import Callable, Mapping, Set
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..loop.output import OutputSpec
from ..loop.subagent import AgentTool
from ..models.scripted import ScriptedModel
from ..tools import Tool, normalize_tools

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["MODEL_SETTINGS", "agent_fingerprint", "callable_identity", "canonical"]

FORMAT = 1
"""Bumped when what the hash covers changes (old fingerprints then stop matching)."""

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

_MAX_DEPTH = 24


def agent_fingerprint(agent: Agent) -> str:
    """The fingerprint of ``agent``'s definition: a sha256 hex digest.

    Equal for equal definitions in any process (see the module's docstring for
    what it covers and excludes).
    """
    output = OutputSpec.of(agent.output_type)
    data = {
        "format": FORMAT,
        "id": agent.id,
        "version": agent.version,
        "model": model_settings(agent.model),
        "tools": _tools(agent.tool_map),
        "instructions": agent.instructions,
        "stream": agent.stream,
        "tool_recovery": dict(sorted(agent.effective_recovery().items())),
        "retry_if": None if agent.retry_if is None else callable_identity(agent.retry_if),
        "max_steps": agent.max_steps,
        "output": output.schema if output is not None else None,
    }
    text = json.dumps(data, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def model_settings(model: Any) -> dict[str, Any]:
    """What of ``model`` shapes its answers, as JSON data (no host, key, timeout or client)."""
    data: dict[str, Any] = {"class": type(model).__qualname__}
    if isinstance(model, ScriptedModel):
        data["model_id"] = model.model_id
        data["mode"] = model.mode
        data["script"] = [canonical(entry) for entry in model.turns]
        return data
    own = getattr(model, "fingerprint_settings", None)
    if callable(own):
        data["settings"] = canonical(own())
        return data
    for name in MODEL_SETTINGS:
        value = getattr(model, name, None)
        if value is not None and not callable(value):
            data[name] = canonical(value)
    return data


def _tools(tools: Mapping[str, Tool]) -> list[Any]:
    described = []
    for name in sorted(tools):
        tool = tools[name]
        gate = tool.needs_approval
        entry: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description,
            "parameters": canonical(tool.parameters),
            "client": tool.is_client_tool,
            "needs_approval": gate if isinstance(gate, bool) else callable_identity(gate),
        }
        if isinstance(tool, AgentTool):
            entry["agent"] = {
                "model": model_settings(tool.model) if tool.model is not None else None,
                "tools": _tools(normalize_tools(tool.tools)),
                "instructions": tool.instructions,
                "max_steps": tool.max_steps,
            }
        described.append(entry)
    return described


def canonical(value: Any, _depth: int = 0) -> Any:
    """``value`` as deterministic JSON data.

    Containers recurse (sets and dict keys sorted), pydantic models and
    dataclasses by their fields, exceptions by type and arguments, callables
    by :func:`callable_identity`, classes by name; any other object counts by
    its type's name only (never by ``repr``, which may hold an address).
    """
    if _depth > _MAX_DEPTH:
        return "<deep>"
    depth = _depth + 1
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else repr(value)
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": hashlib.sha256(bytes(value)).hexdigest()}
    if isinstance(value, enum.Enum):
        return {"enum": _type_name(type(value)), "value": canonical(value.value, depth)}
    if isinstance(value, (list, tuple)):
        return [canonical(item, depth) for item in value]
    if isinstance(value, Mapping):
        pairs = [[canonical(k, depth), canonical(v, depth)] for k, v in value.items()]
        return {"map": sorted(pairs, key=_sort_key)}
    if isinstance(value, Set):
        return {"set": sorted((canonical(item, depth) for item in value), key=_sort_key)}
    if isinstance(value, BaseException):
        return {"error": _type_name(type(value)), "args": canonical(value.args, depth)}
    if isinstance(value, type):
        return {"class": _type_name(value)}
    if isinstance(value, BaseModel):
        fields = {name: getattr(value, name) for name in type(value).model_fields}
        return {"model": _type_name(type(value)), "fields": canonical(fields, depth)}
    if dataclasses.is_dataclass(value):
        fields = {
            f.name: getattr(value, f.name)
            for f in dataclasses.fields(value)
            if f.init and not f.name.startswith("_")
        }
        return {"dataclass": _type_name(type(value)), "fields": canonical(fields, depth)}
    if callable(value):
        return callable_identity(value, depth)
    return {"object": _type_name(type(value))}


def callable_identity(fn: Callable[..., Any], _depth: int = 0) -> Any:
    """A callable as deterministic JSON data: by name if importable, else by its code.

    A function reachable as ``module.qualname`` from an importable module
    counts by that name (a library function, whatever Python version compiled
    it). Any other (a notebook cell's function, a lambda, a local function)
    counts by its compiled code: bytecode, constants (nested code included),
    names, its defaults and the values it closes over; not its file, line or
    name, so an unchanged cell run again, or the same code in another process,
    gives the same data. The values of global names it reads are not included.
    """
    depth = _depth + 1
    if _depth > _MAX_DEPTH:
        return "<deep>"
    if isinstance(fn, functools.partial):
        return {
            "partial": callable_identity(fn.func, depth),
            "args": canonical(fn.args, depth),
            "keywords": canonical(fn.keywords, depth),
        }
    if isinstance(fn, types.MethodType):
        owner = _type_name(type(fn.__self__))
        return {"method": callable_identity(fn.__func__, depth), "of": owner}
    named = _importable_name(fn)
    if named is not None:
        return {"function": named}
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        cells = getattr(fn, "__closure__", None) or ()
        return {
            "code": _code(code),
            "defaults": canonical(getattr(fn, "__defaults__", None), depth),
            "kwdefaults": canonical(getattr(fn, "__kwdefaults__", None), depth),
            "closure": [_cell(cell, depth) for cell in cells],
        }
    if isinstance(fn, type):
        return canonical(fn, depth)
    # a callable object: its state as data (dataclass or pydantic fields), and its __call__
    call = next((vars(c)["__call__"] for c in type(fn).__mro__ if "__call__" in vars(c)), None)
    return {
        "callable": canonical(fn, depth) if _has_fields(fn) else None,
        "class": _type_name(type(fn)),
        "name": getattr(fn, "__qualname__", None),
        "call": callable_identity(call, depth) if isinstance(call, types.FunctionType) else None,
    }


def _has_fields(value: Any) -> bool:
    return dataclasses.is_dataclass(value) or isinstance(value, BaseModel)


def _cell(cell: types.CellType, depth: int) -> Any:
    try:
        return canonical(cell.cell_contents, depth)
    except ValueError:  # an empty cell (a name assigned after the closure was made)
        return "<empty>"


def _code(code: types.CodeType) -> dict[str, Any]:
    return {
        "bytecode": code.co_code.hex(),
        "consts": [_const(c) for c in code.co_consts],
        "names": list(code.co_names),
        "varnames": list(code.co_varnames),
        "freevars": list(code.co_freevars),
        "args": [code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount],
    }


def _const(value: Any) -> Any:
    if isinstance(value, types.CodeType):
        return _code(value)
    if isinstance(value, tuple):
        return [_const(item) for item in value]
    if isinstance(value, frozenset):
        return {"set": sorted((_const(item) for item in value), key=_sort_key)}
    if value is Ellipsis:
        return "<...>"
    return canonical(value)


def _importable_name(fn: Any) -> str | None:
    """``module:qualname`` when that name, imported, is ``fn`` itself (not ``__main__``)."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module == "__main__" or "<" in qualname:
        return None
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return f"{module}:{qualname}" if found is fn else None


def _type_name(cls: type) -> str:
    # the qualified name only: the same class defined in a notebook cell (__main__)
    # and in a worker's module is the same definition
    return cls.__qualname__


def _sort_key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=True)
