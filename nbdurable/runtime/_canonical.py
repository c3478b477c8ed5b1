"""Values and callables as deterministic JSON data: what a definition fingerprint hashes.

The data never depends on object identity, memory addresses or Python's
randomized ``hash()``, and callables count by their compiled code, not their
identity, so re-running an unchanged notebook cell, or the same code in another
process, gives the same data.

What a callable closes over counts by what decides its behaviour, not by the
state it keeps: a function it calls by its code, a class by its name, a value
that cannot change (a number, a string, a tuple of those, a frozen dataclass)
by its value; a mutable value (a list, a dict, an object) and a cell the
function itself reassigns (``nonlocal calls; calls += 1``) by its type only,
so a call counter does not change the data as it counts. Mutable defaults
count the same way. ``legacy=True`` gives the previous scheme's data (every
cell and default by its current value), which fingerprints recorded before
this rule are recomputed with.
"""

from __future__ import annotations

import dataclasses
import dis
import enum
import functools
import hashlib
import json
import sys
import types
from collections.abc import Callable, Mapping, Set
from typing import Any

from pydantic import BaseModel

__all__ = ["callable_identity", "canonical", "type_name"]

_MAX_DEPTH = 24
_FUNCTIONS = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    functools.partial,
)


def canonical(value: Any, _depth: int = 0, *, legacy: bool = False) -> Any:
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
        value_data = canonical(value.value, depth, legacy=legacy)
        return {"enum": type_name(type(value)), "value": value_data}
    if isinstance(value, (list, tuple)):
        return [canonical(item, depth, legacy=legacy) for item in value]
    if isinstance(value, Mapping):
        pairs = [
            [canonical(k, depth, legacy=legacy), canonical(v, depth, legacy=legacy)]
            for k, v in value.items()
        ]
        return {"map": sorted(pairs, key=_sort_key)}
    if isinstance(value, Set):
        items = (canonical(item, depth, legacy=legacy) for item in value)
        return {"set": sorted(items, key=_sort_key)}
    if isinstance(value, BaseException):
        args = canonical(value.args, depth, legacy=legacy)
        return {"error": type_name(type(value)), "args": args}
    if isinstance(value, type):
        return {"class": type_name(value)}
    if isinstance(value, BaseModel):
        fields = {name: getattr(value, name) for name in type(value).model_fields}
        return {
            "model": type_name(type(value)),
            "fields": canonical(fields, depth, legacy=legacy),
        }
    if dataclasses.is_dataclass(value):
        fields = {
            f.name: getattr(value, f.name)
            for f in dataclasses.fields(value)
            if f.init and not f.name.startswith("_")
        }
        return {
            "dataclass": type_name(type(value)),
            "fields": canonical(fields, depth, legacy=legacy),
        }
    if callable(value):
        return callable_identity(value, depth, legacy=legacy)
    return {"object": type_name(type(value))}


def callable_identity(fn: Callable[..., Any], _depth: int = 0, *, legacy: bool = False) -> Any:
    """A callable as deterministic JSON data: by name if importable, else by its code.

    A function reachable as ``module.qualname`` from an importable module
    counts by that name (a library function, whatever Python version compiled
    it). Any other (a notebook cell's function, a lambda, a local function)
    counts by its compiled code: bytecode, constants (nested code included),
    names, its defaults and what it closes over (see the module's docstring);
    not its file, line or name, so an unchanged cell run again, or the same
    code in another process, gives the same data. The values of global names
    it reads are not included.
    """
    depth = _depth + 1
    if _depth > _MAX_DEPTH:
        return "<deep>"
    if isinstance(fn, functools.partial):
        return {
            "partial": callable_identity(fn.func, depth, legacy=legacy),
            "args": canonical(fn.args, depth, legacy=legacy),
            "keywords": canonical(fn.keywords, depth, legacy=legacy),
        }
    if isinstance(fn, types.MethodType):
        owner = type_name(type(fn.__self__))
        return {"method": callable_identity(fn.__func__, depth, legacy=legacy), "of": owner}
    named = _importable_name(fn)
    if named is not None:
        return {"function": named}
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        cells = getattr(fn, "__closure__", None) or ()
        defaults = getattr(fn, "__defaults__", None)
        kwdefaults = getattr(fn, "__kwdefaults__", None)
        if legacy:
            return {
                "code": _code(code),
                "defaults": canonical(defaults, depth, legacy=True),
                "kwdefaults": canonical(kwdefaults, depth, legacy=True),
                "closure": [_legacy_cell(cell, depth) for cell in cells],
            }
        assigned = _assigned_cells(code)
        names = code.co_freevars
        return {
            "code": _code(code),
            "defaults": [_settled(v, depth) for v in defaults or ()],
            "kwdefaults": {k: _settled(v, depth) for k, v in sorted((kwdefaults or {}).items())},
            "closure": [
                _cell(cell, depth, reassigned=name in assigned)
                for name, cell in zip(names, cells, strict=False)
            ],
        }
    if isinstance(fn, type):
        return canonical(fn, depth, legacy=legacy)
    # a callable object: its state as data (dataclass or pydantic fields), and its __call__
    call = next((vars(c)["__call__"] for c in type(fn).__mro__ if "__call__" in vars(c)), None)
    return {
        "callable": canonical(fn, depth, legacy=legacy) if _has_fields(fn) else None,
        "class": type_name(type(fn)),
        "name": getattr(fn, "__qualname__", None),
        "call": (
            callable_identity(call, depth, legacy=legacy)
            if isinstance(call, types.FunctionType)
            else None
        ),
    }


def type_name(cls: type) -> str:
    """A class's qualified name only.

    The same class defined in a notebook cell (``__main__``) and in a worker's
    module is the same definition.
    """
    return cls.__qualname__


def _has_fields(value: Any) -> bool:
    return dataclasses.is_dataclass(value) or isinstance(value, BaseModel)


def _legacy_cell(cell: types.CellType, depth: int) -> Any:
    try:
        return canonical(cell.cell_contents, depth, legacy=True)
    except ValueError:  # an empty cell (a name assigned after the closure was made)
        return "<empty>"


def _cell(cell: types.CellType, depth: int, *, reassigned: bool) -> Any:
    try:
        content = cell.cell_contents
    except ValueError:  # an empty cell (a name assigned after the closure was made)
        return "<empty>"
    if reassigned:  # state the function keeps (nonlocal calls; calls += 1): its type only
        return {"state": type_name(type(content))}
    return _settled(content, depth)


def _settled(value: Any, depth: int) -> Any:
    """``value`` by what of it cannot change.

    A settled value by its value, code by its code, anything mutable by its type only.
    """
    if depth > _MAX_DEPTH:
        return "<deep>"
    if (
        value is None
        or isinstance(value, (bool, int, float, str, bytes, complex, enum.Enum, type))
        or _frozen(value)
    ):
        return canonical(value, depth)
    if isinstance(value, tuple):
        return [_settled(item, depth + 1) for item in value]
    if isinstance(value, frozenset):
        return {"set": sorted((_settled(item, depth + 1) for item in value), key=_sort_key)}
    if isinstance(value, _FUNCTIONS):
        return callable_identity(value, depth)
    if isinstance(value, types.ModuleType):
        return {"module": value.__name__}
    return {"state": type_name(type(value))}


def _frozen(value: Any) -> bool:
    """A frozen dataclass or pydantic model (its fields are not reassigned)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(type(value), "__dataclass_params__", None)
        return bool(getattr(params, "frozen", False))
    if isinstance(value, BaseModel):
        return bool(type(value).model_config.get("frozen", False))
    return False


def _assigned_cells(code: types.CodeType) -> set[str]:
    """The free variables ``code`` (or code nested in it) reassigns or deletes."""
    names: set[str] = set()
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("STORE_DEREF", "DELETE_DEREF"):
            names.add(str(instruction.argval))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _assigned_cells(const)
    return names


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


def _sort_key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=True)
