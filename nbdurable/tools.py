"""Tools: ``@tool`` builds a JSON schema from type hints and validates arguments with pydantic.

Inside a run, nothing a tool does crashes the loop: invalid arguments, unknown
tool names and exceptions raised by a tool become ``is_error`` tool results the
model sees.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar, Union, Unpack, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ._errors import ConfigurationError
from ._json_schema import schema_problems
from .models._base import ToolSpec

__all__ = [
    "NeedsApproval",
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "WrapOptions",
    "client_tool",
    "normalize_tools",
    "tool",
]

NeedsApproval = Union[bool, Callable[[dict[str, Any]], bool | Awaitable[bool]]]
F = TypeVar("F", bound=Callable[..., Any])
RECOVERY_POLICIES = ("safe", "idempotent", "manual")
"""A tool's recovery after a crash mid-call (see ``nbdurable.Agent(tool_recovery=...)``)."""


class _NotGiven:
    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()
"""Marks an optional argument that was not passed (where None is a meaningful value)."""
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class WrapOptions(TypedDict, total=False):
    """What :meth:`Tool.from_langchain` and its kin take besides the tool, all optional.

    Attributes:
        name: Name the model uses (default: the tool's).
        description: Description for the model (default: the tool's).
        needs_approval: True, or a callable on the arguments, to gate calls
            (default: the tool's own gate where its framework has one, else False).
        recovery: Recovery after a crash mid-call (``"safe"``, ``"idempotent"``,
            ``"manual"``); an agent's ``tool_recovery`` overrides it.
        allow_edit: Let a human approving a gated call edit its arguments first
            (validated against the tool's schema; default False).
    """

    name: str | None
    description: str | None
    needs_approval: NeedsApproval | None
    recovery: str | None
    allow_edit: bool


@dataclass(frozen=True)
class ToolContext:
    """Handed to a tool that declares a parameter annotated ``ToolContext``.

    Attributes:
        tool_call_id: The model-issued id of this call.
        tool_name: The tool's name.
        run_id: The durable run's id, or None for a call without a session.
        idempotency_key: ``f"{run_id}:{tool_call_id}"`` (the same after a crash
            re-runs the call), or the tool call id alone without a run.
        agent_path: Sub-agent names down to the agent making the call.
        step_index: Index of the step the call belongs to.
        owner_check: Set by the runtime executing the call: what
            :meth:`ensure_owner` runs. None outside a runtime.
    """

    tool_call_id: str
    tool_name: str
    run_id: str | None = None
    agent_path: tuple[str, ...] = ()
    step_index: int = 0
    owner_check: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    @property
    def idempotency_key(self) -> str:
        """A key that stays the same when a crash makes the call run again."""
        return f"{self.run_id}:{self.tool_call_id}" if self.run_id else self.tool_call_id

    def ensure_owner(self) -> None:
        """Confirm that this worker still owns the run; call it right before a side effect.

        Under a runtime, one store round trip checks the run's fencing token and
        renews this worker's lease (so the lease then has its full length ahead).
        It is a plain method that works from async tools, sync tools and worker
        threads alike: it blocks for that one round trip, as every write of the
        runtime does. Outside a runtime (``generate_text``) nobody else can own
        the call, and it returns at once.

        Raises:
            LeaseLostError: Another worker took the run over (this one was paused
                or cut off past its lease): do not act; the runtime records
                nothing more from this call.
        """
        if self.owner_check is not None:
            self.owner_check()


class ToolArgumentsError(ValueError):
    """A tool call's arguments do not match the tool's schema (becomes an is_error result)."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


@dataclass(frozen=True, eq=False)
class Tool:
    """A tool the model can call.

    Attributes:
        name: Name the model uses.
        description: What the tool does, shown to the model.
        parameters: JSON schema of the arguments.
        execute: The function to run; None makes a client tool (the caller
            supplies the result; the run suspends when it is called).
        needs_approval: True, or a callable on the arguments (sync or async),
            to gate calls behind a human verdict.
        args_model: Pydantic model validating the arguments, when known.
        context_param: Name of the parameter that receives the :class:`ToolContext`.
        recovery: The tool's own recovery policy after a crash mid-call
            (``"safe"``, ``"idempotent"`` or ``"manual"``), used by the runtime when
            the agent's ``tool_recovery`` does not name the tool; None means manual.
        allow_edit: Whether a human approving a gated call may change its
            arguments first (the call then runs with the edited ones, validated
            against ``parameters``); default False.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    execute: Callable[..., Any] | None = None
    needs_approval: NeedsApproval = False
    args_model: type[BaseModel] | None = None
    context_param: str | None = None
    recovery: str | None = None
    allow_edit: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ConfigurationError(
                f"invalid tool name {self.name!r}: use letters, digits, '_', '-' or '.' (max 64)"
            )
        if self.recovery is not None and self.recovery not in RECOVERY_POLICIES:
            raise ConfigurationError(
                f"tool {self.name!r}: recovery must be 'safe', 'idempotent' or 'manual', "
                f"not {self.recovery!r}"
            )
        if not isinstance(self.allow_edit, bool):
            raise ConfigurationError(f"tool {self.name!r}: allow_edit must be a bool")

    @classmethod
    def from_langchain(cls, tool: Any, **options: Unpack[WrapOptions]) -> Tool:
        """Wrap a LangChain tool (a ``BaseTool``, e.g. from ``@tool``); needs ``langchain-core``.

        The argument schema and description come from the LangChain tool;
        approval, recovery and the :class:`ToolContext` stay nbdurable's. See
        :func:`nbdurable.interop._langchain_tools.from_langchain`.
        """
        from .interop._langchain_tools import from_langchain

        return from_langchain(tool, **options)

    @classmethod
    def from_pydantic_ai(
        cls, tool: Any, *, deps: Any = NOT_GIVEN, **options: Unpack[WrapOptions]
    ) -> Tool:
        """Wrap a Pydantic AI tool (``pydantic_ai.Tool`` or a function); needs ``pydantic-ai-slim``.

        A tool taking ``RunContext[Deps]`` gets ``deps`` as ``ctx.deps``; without
        ``deps=`` such a tool is refused. ``needs_approval`` defaults to the
        tool's ``requires_approval``. See
        :func:`nbdurable.interop._pydantic_ai_tools.from_pydantic_ai`.
        """
        from .interop._pydantic_ai_tools import from_pydantic_ai

        return from_pydantic_ai(tool, deps=deps, **options)

    @classmethod
    def from_openai_agents(cls, tool: Any, **options: Unpack[WrapOptions]) -> Tool:
        """Wrap an OpenAI Agents SDK function tool (``@function_tool``); needs ``openai-agents``.

        The call runs through the tool's own ``on_invoke_tool``; ``needs_approval``
        defaults to the tool's. See
        :func:`nbdurable.interop._openai_agents_tools.from_openai_agents`.
        """
        from .interop._openai_agents_tools import from_openai_agents

        return from_openai_agents(tool, **options)

    @property
    def is_client_tool(self) -> bool:
        """True when the tool has no execute function."""
        return self.execute is None

    @property
    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate ``args``; return keyword arguments for ``execute``.

        Raises:
            ToolArgumentsError: The arguments do not match the schema.
        """
        if not isinstance(args, Mapping):
            raise ToolArgumentsError(f"arguments must be a JSON object, got {type(args).__name__}")
        try:
            return self.checked_args(dict(args))
        except ValidationError as exc:
            raise ToolArgumentsError(describe_validation(self.name, exc)) from None

    def checked_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` through the tool's own validation (``args_model``), for :meth:`validate_args`.

        A tool wrapping another framework's overrides it with that framework's.

        Raises:
            ValidationError: Pydantic's, for arguments that do not fit.
        """
        if self.args_model is None:
            return args
        model = self.args_model.model_validate(args)
        return {name: getattr(model, name) for name in type(model).model_fields}

    def validate_edit(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate a human's edited arguments; return keyword arguments for ``execute``.

        Held to the tool's JSON schema (``parameters``) and then to its own
        validation (:meth:`validate_args`); whether the tool allows editing
        (``allow_edit``) is the caller's check.

        Raises:
            ToolArgumentsError: The arguments do not match the schema.
        """
        if not isinstance(args, Mapping):
            raise ToolArgumentsError(f"arguments must be a JSON object, got {type(args).__name__}")
        if self.args_model is None:  # a pydantic model says it all, and better
            problems = schema_problems(self.parameters, dict(args))
            if problems:
                raise ToolArgumentsError(
                    f"Invalid arguments for tool {self.name!r}: " + "; ".join(problems)
                )
        return self.validate_args(args)

    async def requires_approval(self, args: Mapping[str, Any]) -> bool:
        """Evaluate ``needs_approval`` on the call's arguments."""
        gate = self.needs_approval
        if isinstance(gate, bool):
            return gate
        decision = gate(dict(args))
        if inspect.isawaitable(decision):
            decision = await decision
        return bool(decision)

    async def invoke(self, kwargs: dict[str, Any], context: ToolContext) -> Any:
        """Run ``execute`` with validated arguments; return a JSON-able result."""
        if self.execute is None:
            raise ConfigurationError(f"tool {self.name!r} is a client tool and cannot run here")
        if self.context_param is not None:
            kwargs = {**kwargs, self.context_param: context}
        value = self.execute(**kwargs)
        if inspect.isawaitable(value):
            value = await value
        return to_jsonable(value)


def to_jsonable(value: Any) -> Any:
    """Turn a tool's return value into JSON-able data (pydantic models are dumped)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return str(value)
    return value


def describe_validation(name: str, exc: ValidationError) -> str:
    """A tool's argument errors in one line the model can act on."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ())) or "arguments"
        problems.append(f"{where}: {error.get('msg')}")
    return f"Invalid arguments for tool {name!r}: " + "; ".join(problems)


def _doc_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into the summary and the per-argument descriptions."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if re.match(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?):\s*$", stripped):
            section = stripped[:-1]
            current = None
            continue
        if section is None:
            summary_lines.append(line)
        elif section in ("Args", "Arguments", "Parameters") and stripped:
            match = re.match(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", stripped)
            if match and line.startswith(("    ", "\t")) and not line.startswith("        "):
                current = match.group(1).lstrip("*")
                params[current] = match.group(2)
            elif current:
                params[current] = f"{params[current]} {stripped}".strip()
    return "\n".join(summary_lines).strip(), params


def _from_function(
    func: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    needs_approval: NeedsApproval,
    recovery: str | None = None,
    allow_edit: bool = False,
) -> Tool:
    signature = inspect.signature(func)
    try:
        hints = get_type_hints(func)
    except Exception as exc:  # unresolvable forward references
        raise ConfigurationError(f"cannot read the type hints of {func!r}: {exc}") from exc
    summary, param_docs = _doc_parts(func.__doc__)
    fields: dict[str, Any] = {}
    context_param = None
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(f"tool {func.__name__!r}: *args/**kwargs are not supported")
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            context_param = param.name
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, Field(default, description=param_docs.get(param.name)))
    tool_name = name or func.__name__
    args_model = create_model(f"{tool_name}_arguments", __base__=_Args, **fields)
    schema = args_model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return Tool(
        name=tool_name,
        description=description if description is not None else summary,
        parameters=schema,
        execute=func,
        needs_approval=needs_approval,
        args_model=args_model,
        context_param=context_param,
        recovery=recovery,
        allow_edit=allow_edit,
    )


@overload
def tool(func: F, /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
    recovery: str | None = None,
    allow_edit: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
    recovery: str | None = None,
    allow_edit: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function (sync or async) into a :class:`Tool`.

    The JSON schema comes from the type hints, the description from the
    docstring's summary, argument descriptions from its ``Args:`` section. A
    parameter annotated :class:`ToolContext` receives the call's context and is
    hidden from the model.

    Args:
        func: The function, when used as a bare ``@tool``.
        name: Tool name (default: the function's name).
        description: Tool description (default: the docstring summary).
        needs_approval: True, or a callable on the arguments, to gate calls.
        recovery: The tool's recovery policy after a crash mid-call (``"safe"``,
            ``"idempotent"`` or ``"manual"``); an agent's ``tool_recovery`` overrides it.
        allow_edit: Let a human approving a gated call edit its arguments first
            (validated against the schema; default False).

    Example:
        >>> @tool(needs_approval=True)
        ... def drop_table(name: str) -> str:
        ...     '''Drop a warehouse table.'''
        ...     return f"dropped {name}"
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        if not callable(f):
            raise ConfigurationError(f"@tool needs a function, got {f!r}")
        return _from_function(
            f,
            name=name,
            description=description,
            needs_approval=needs_approval,
            recovery=recovery,
            allow_edit=allow_edit,
        )

    if func is not None:
        return wrap(func)
    return wrap


def client_tool(
    name: str,
    description: str = "",
    parameters: dict[str, Any] | type[BaseModel] | None = None,
    *,
    needs_approval: NeedsApproval = False,
    allow_edit: bool = False,
) -> Tool:
    """A tool the caller executes: a run that calls it suspends until a result is supplied.

    Args:
        name: Tool name.
        description: What it does.
        parameters: A JSON schema or a pydantic model of the arguments.
        needs_approval: Gate calls behind a verdict as well.
        allow_edit: Let the approver edit the arguments first.
    """
    args_model = None
    if parameters is None:
        schema: dict[str, Any] = {"type": "object", "properties": {}}
    elif isinstance(parameters, type) and issubclass(parameters, BaseModel):
        args_model = parameters
        schema = parameters.model_json_schema()
    elif isinstance(parameters, dict):
        schema = parameters
    else:
        raise ConfigurationError("parameters must be a JSON schema dict or a pydantic model")
    return Tool(
        name=name,
        description=description,
        parameters=schema,
        execute=None,
        needs_approval=needs_approval,
        args_model=args_model,
        allow_edit=allow_edit,
    )


def normalize_tools(tools: Iterable[Tool] | Mapping[str, Tool] | None) -> dict[str, Tool]:
    """Accept a list or a name -> tool mapping; return a name -> tool dict.

    Raises:
        ConfigurationError: Two tools share a name, or an entry is not a Tool.
    """
    if tools is None:
        return {}
    result: dict[str, Tool] = {}
    items = tools.items() if isinstance(tools, Mapping) else ((None, t) for t in tools)
    for key, item in items:
        if not isinstance(item, Tool):
            raise ConfigurationError(
                f"{item!r} is not a Tool; decorate functions with @nbdurable.tool"
            )
        if key is not None and key != item.name:
            item = _renamed(item, key)
        if item.name in result:
            raise ConfigurationError(f"two tools are named {item.name!r}")
        result[item.name] = item
    return result


def _renamed(item: Tool, name: str) -> Tool:
    return dataclasses.replace(item, name=name)
