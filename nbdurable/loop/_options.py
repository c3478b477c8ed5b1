"""Options and results of the agent loop: stop conditions, prepare_step, step and call results."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, TypeVar, Unpack, cast

from .._deps import Deps
from .._errors import ConfigurationError
from ..durable._signer import ApprovalSigner
from ..history import History
from ..messages import (
    Message,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..models._base import Model
from ..runs import RunGrants
from ..tools import Tool, normalize_tools
from ._output import OutputSpec

__all__ = [
    "DEFAULT_MAX_STEPS",
    "MAX_AGENT_DEPTH",
    "AgentOptions",
    "ApproveToolCall",
    "GenerateTextResult",
    "LoopOptions",
    "PrepareStep",
    "PrepareStepResult",
    "StepContext",
    "StepResult",
    "StopCondition",
    "build_options",
    "cost_exceeds",
    "step_count_is",
    "takes_options",
    "text_head",
    "total_tokens_exceed",
    "usage_line",
]

DEFAULT_MAX_STEPS = 20
MAX_AGENT_DEPTH = 8


@dataclass(frozen=True)
class StepResult:
    """What one step did.

    Attributes:
        step_index: Index of the step within the run (continues across legs).
        text: The model's text in this step.
        tool_calls: The calls the model made.
        tool_results: Their results (empty for a suspended step).
        usage: This step's usage.
        finish_reason: The model's finish reason for this step.
    """

    step_index: int
    text: str
    tool_calls: tuple[ToolCallPart, ...]
    tool_results: tuple[ToolResultPart, ...]
    usage: Usage
    finish_reason: str


@dataclass(frozen=True)
class StepContext:
    """What ``prepare_step`` and stop conditions see.

    Attributes:
        step_index: Index of the step about to run (prepare_step) or just run (stop).
        messages: The history so far.
        usage: Cumulative usage of the whole run, all legs included.
        leg_usage: Usage of this call only.
        steps: Steps completed by this call (read-only; reads like a tuple).
        model: The call's model.
    """

    step_index: int
    messages: History
    usage: Usage
    leg_usage: Usage
    steps: Sequence[StepResult]
    model: Model


StopCondition = Callable[[StepContext], bool]


@dataclass(frozen=True)
class PrepareStepResult:
    """Overrides for one step; None fields keep the call's settings.

    Attributes:
        model: A different model for this step.
        tools: Names of the tools offered this step (a subset of the call's tools).
        messages: The messages sent for this step (history is not changed).
        instructions: System instructions for this step.
    """

    model: Model | None = None
    tools: Sequence[str] | None = None
    messages: Sequence[Message] | None = None
    instructions: str | None = None


PrepareStep = Callable[
    [StepContext], PrepareStepResult | Awaitable[PrepareStepResult | None] | None
]
ApproveToolCall = Callable[
    [ToolApprovalRequest],
    bool | ToolApprovalResponse | Awaitable[bool | ToolApprovalResponse],
]


def step_count_is(n: int) -> StopCondition:
    """Stop once the run has completed ``n`` steps (counted across legs)."""

    def condition(ctx: StepContext) -> bool:
        return ctx.step_index + 1 >= n

    condition.__name__ = f"step_count_is({n})"
    return condition


def total_tokens_exceed(n: int) -> StopCondition:
    """Stop once the run's cumulative total tokens exceed ``n``."""

    def condition(ctx: StepContext) -> bool:
        return ctx.usage.total_tokens > n

    condition.__name__ = f"total_tokens_exceed({n})"
    return condition


def cost_exceeds(usd: float) -> StopCondition:
    """Stop once the run's cumulative cost exceeds ``usd`` dollars."""

    def condition(ctx: StepContext) -> bool:
        return ctx.usage.cost is not None and ctx.usage.cost > usd

    condition.__name__ = f"cost_exceeds({usd})"
    return condition


@dataclass(frozen=True)
class LoopOptions:
    """Every option of one loop call, validated (built by ``generate_text``/``stream_chat``)."""

    model: Model
    tools: dict[str, Tool]
    instructions: str | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    stop_when: tuple[StopCondition, ...] = ()
    prepare_step: PrepareStep | None = None
    max_tool_concurrency: int | None = None
    approve_tool_call: ApproveToolCall | None = None
    approval_responses: tuple[ToolApprovalResponse, ...] = ()
    approval_signer: ApprovalSigner | None = None
    approval_max_age_ms: int | None = None
    deps: Deps = field(default_factory=Deps)
    agent_path: tuple[str, ...] = ()
    depth: int = 0
    output: OutputSpec | None = None
    session_run_id: str | None = None
    """A sub-agent's: the session's (top-level) run id its approval tokens bind."""
    approval_grants: RunGrants | Callable[[], RunGrants] = RunGrants()
    """Standing approvals the gate consults (verified at each gated call); a
    function is asked again at each gated call (the run record as its owner last read it)."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ConfigurationError(
                f"max_steps must be a positive integer, not {self.max_steps!r}"
            )
        if self.max_tool_concurrency is not None and (
            not isinstance(self.max_tool_concurrency, int) or self.max_tool_concurrency < 1
        ):
            raise ConfigurationError("max_tool_concurrency must be None or a positive integer")
        if self.approval_max_age_ms is not None and self.approval_max_age_ms <= 0:
            raise ConfigurationError("approval_max_age_ms must be positive or None")
        if not hasattr(self.model, "generate"):
            raise ConfigurationError(f"{self.model!r} is not a Model (it has no generate())")
        for response in self.approval_responses:
            if not isinstance(response, ToolApprovalResponse):
                raise ConfigurationError(
                    f"approval_responses must hold ToolApprovalResponse, got {response!r}"
                )


@dataclass(frozen=True, repr=False)
class GenerateTextResult:
    """The result of one call (one leg of a run).

    Attributes:
        text: The final text (of the last step).
        status: ``completed``, or ``suspended`` on approvals or client tools.
        finish_reason: ``stop``, ``length``, ``content_filter``, ``tool_calls``,
            ``max_steps``, ``stop_condition`` or ``suspended``.
        messages: The full history at the end of the call.
        response_messages: The messages this call added.
        steps: The steps this call ran.
        usage: This leg's own usage.
        total_usage: The whole run's cumulative usage (equals ``usage`` without a session).
        pending_approvals: Gated calls awaiting a verdict (with tokens when signed,
            with ``agent_path`` when a sub-agent asks).
        pending_tool_calls: Client tool calls awaiting a result.
        run_id: The durable run id, or None for a call without session or tools.
        step_index: Index of the last step of the run so far (-1 if none).
        output: With ``output_type``, the final answer validated into that type
            (None while suspended, or when the run ended on a stop condition).
    """

    text: str
    status: Literal["completed", "suspended"]
    finish_reason: str
    messages: History
    response_messages: tuple[Message, ...]
    steps: tuple[StepResult, ...]
    usage: Usage
    total_usage: Usage
    pending_approvals: tuple[ToolApprovalRequest, ...] = ()
    pending_tool_calls: tuple[ToolCallPart, ...] = ()
    run_id: str | None = None
    step_index: int = -1
    output: Any = None

    def __repr__(self) -> str:
        # short whatever the run's length: asyncio's runner reprs a finished task's result
        waiting = len(self.pending_approvals) + len(self.pending_tool_calls)
        return (
            f"GenerateTextResult(text={text_head(self.text)}, status={self.status!r}, "
            f"finish_reason={self.finish_reason!r}, steps={len(self.steps)}, "
            f"messages={len(self.messages)}, usage={usage_line(self.total_usage)}, "
            f"run_id={self.run_id!r}" + (f", pending={waiting}" if waiting else "") + ")"
        )


def text_head(text: str, limit: int = 60) -> str:
    """``text``'s repr cut to about ``limit`` characters, with its length when cut."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} chars)"


def usage_line(usage: Usage) -> str:
    """A usage in one short line: ``'12 in + 34 out tokens, $0.0012'``."""
    line = f"{usage.input_tokens} in + {usage.output_tokens} out tokens"
    if usage.cost is not None:
        line += f", ${usage.cost:.4f}"
    return repr(line)


class _Model(TypedDict):
    model: Model  # the one required option (a base, so it holds at run time too)


class AgentOptions(_Model, total=False):
    """The agent spec: the options of one agent loop, written once.

    ``generate_text``, ``stream_chat`` and both resumes take them as keywords
    (``**options: Unpack[AgentOptions]``, so a type checker checks each one, and
    :func:`takes_options` gives those functions their named signature); an
    :class:`~nbdurable.Agent` builds them (``agent.loop_options()``). A dict of
    them may be kept and passed again: ``generate_text(messages=..., **options)``.

    Attributes:
        model: The model (see :class:`~nbdurable.models.Model`); required.
        tools: Tools the model may call (a list or a name -> tool mapping).
        instructions: System instructions sent with every model call.
        max_steps: Runaway guard (default :data:`DEFAULT_MAX_STEPS`): the run
            ends (``finish_reason="max_steps"``) once it has this many steps,
            counted across legs.
        stop_when: Stop conditions checked after each tool step, e.g.
            ``total_tokens_exceed(10_000)``; they see the whole run's usage.
        prepare_step: Called before each step; may return a
            :class:`PrepareStepResult` overriding model, tools, messages or
            instructions for that step.
        max_tool_concurrency: How many calls of one batch run at once (None: all).
        approve_tool_call: Server-mode approver for gated calls; without it
            gated calls suspend the run (client mode).
        approval_responses: Verdicts for calls awaiting approval (in the
            messages, or in the checkpoint a resume continues).
        approval_signer: Signs approval requests and verifies returned tokens.
        approval_max_age_ms: Tokens this old or older are refused.
        output_type: Structured output: the final answer must be JSON of this type
            (a pydantic model, dataclass or TypedDict); the result's ``output``
            holds it validated. A failed validation is an ``OutputValidationError``.
        deps: Clock, id generator and logger.
    """

    tools: Iterable[Tool] | Mapping[str, Tool] | None
    instructions: str | None
    max_steps: int
    stop_when: StopCondition | Sequence[StopCondition] | None
    prepare_step: PrepareStep | None
    max_tool_concurrency: int | None
    approve_tool_call: ApproveToolCall | None
    approval_responses: Sequence[ToolApprovalResponse] | None
    approval_signer: ApprovalSigner | None
    approval_max_age_ms: int | None
    output_type: type[Any] | None
    deps: Deps | None


_DEFAULTS: dict[str, Any] = {"max_steps": DEFAULT_MAX_STEPS}
"""The options whose default is not None (``model`` has none: it is required)."""

F = TypeVar("F", bound=Callable[..., Any])


def takes_options(function: F) -> F:
    """Give an entry point that takes ``**options: Unpack[AgentOptions]`` the options by name.

    Its signature (``inspect.signature``, ``help()``, a notebook's tooltip)
    lists every option with its default, and a call is bound to it at once: an
    unknown or missing keyword raises ``TypeError`` when called, as a plain
    signature would, also for a coroutine function (before anything awaits it).
    """
    own = [
        p for p in inspect.signature(function).parameters.values() if p.kind is not p.VAR_KEYWORD
    ]
    kw = inspect.Parameter.KEYWORD_ONLY
    # as written (``StopCondition``, not its expansion), like the function's own hints
    hints = {n: getattr(t, "__forward_arg__", t) for n, t in AgentOptions.__annotations__.items()}
    options = [
        inspect.Parameter(
            name,
            kw,
            default=inspect.Parameter.empty
            if name in AgentOptions.__required_keys__
            else _DEFAULTS.get(name),
            annotation=hints[name],
        )
        for name in hints
    ]
    # model first, then the function's own keywords (messages, session), then the rest
    positional = [p for p in own if p.kind is not kw]
    keywords = [p for p in own if p.kind is kw]
    signature = inspect.Signature([*positional, options[0], *keywords, *options[1:]])

    @functools.wraps(function)
    def bound(*args: Any, **kwargs: Any) -> Any:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:  # worded as the interpreter words it
            raise TypeError(f"{function.__name__}() {exc}") from None
        return function(*args, **kwargs)

    bound.__signature__ = signature  # type: ignore[attr-defined]
    mark = getattr(inspect, "markcoroutinefunction", None)  # Python 3.12+
    if mark is not None and inspect.iscoroutinefunction(function):
        mark(bound)  # still a coroutine function to inspect, as it is to await
    return cast(F, bound)


def build_options(
    *, agent_path: tuple[str, ...] = (), **options: Unpack[AgentOptions]
) -> LoopOptions:
    """Validate and normalize an agent's options (:class:`AgentOptions`) for the loop.

    Args:
        agent_path: Where the loop runs (a sub-agent's, for a resumed checkpoint).
        **options: The agent spec.

    Raises:
        ConfigurationError: An invalid option.
    """
    stop_when = options.get("stop_when")
    if stop_when is None:
        conditions: tuple[StopCondition, ...] = ()
    elif callable(stop_when):
        conditions = (stop_when,)
    else:
        conditions = tuple(stop_when)
    signer = options.get("approval_signer")
    if signer is not None and not isinstance(signer, ApprovalSigner):
        raise ConfigurationError("approval_signer must be an ApprovalSigner")
    return LoopOptions(
        model=options["model"],
        tools=normalize_tools(options.get("tools")),
        instructions=options.get("instructions"),
        max_steps=options.get("max_steps", DEFAULT_MAX_STEPS),
        stop_when=conditions,
        prepare_step=options.get("prepare_step"),
        max_tool_concurrency=options.get("max_tool_concurrency"),
        approve_tool_call=options.get("approve_tool_call"),
        approval_responses=tuple(options.get("approval_responses") or ()),
        approval_signer=signer,
        approval_max_age_ms=options.get("approval_max_age_ms"),
        deps=options.get("deps") or Deps(),
        agent_path=agent_path,
        output=OutputSpec.of(options.get("output_type")),
    )
