"""Agents and their registrations: defined once, keyed by (id, version)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ConfigurationError, DurableConflictError
from ..loop._options import DEFAULT_MAX_STEPS, AgentOptions
from ..loop._output import OutputSpec
from ..models._base import Model
from ..tools import Tool, normalize_tools
from ..tracing import model_name
from . import _lifecycle as lifecycle
from ._fingerprint import Definition, agent_fingerprint
from ._limits import ModelRetry
from ._origin import Birthplace, OriginMemo, agent_origin, birthplace

__all__ = ["TOOL_RECOVERY", "Agent", "Registry", "ToolRecovery"]

ToolRecovery = Literal["safe", "idempotent", "manual"]
TOOL_RECOVERY: frozenset[str] = frozenset({"safe", "idempotent", "manual"})


@dataclass(frozen=True, eq=False)
class Agent:
    """An agent the runtime can run: model, tools, instructions, and how to recover.

    Define it once (in a notebook cell or a module); the runtime registers it
    under ``(id, version)``. Re-running an unchanged definition reuses the
    registration; a changed one needs a new ``version``.

    Args:
        id: Unique name of the agent.
        model: Its model.
        tools: Its tools (a list or a name -> tool mapping).
        instructions: System instructions for every model call.
        version: Required, nonblank. Bump it when the model, tools, schemas or
            instructions change incompatibly.
        stream: Stream the model and persist its deltas, so the run widget shows
            text as it arrives. None (the default): stream when the model can
            (has a ``stream`` method and no false ``can_stream``); resolved at
            construction, so ``agent.stream`` is always a bool. ``True`` needs
            a streaming model; ``False`` calls ``generate`` only.
        tool_recovery: Tool name -> ``"safe"`` (re-run after a crash mid-tool),
            ``"idempotent"`` (re-run with the same idempotency key) or
            ``"manual"`` (park the run in ``needs_attention``). A tool it does not
            name keeps its own ``Tool.recovery`` (MCP tools get one from their
            annotations), else it is manual.
        model_retry: Opt-in persisted retry of model errors (a :class:`ModelRetry`
            or its fields as a dict).
        max_steps: Runaway guard of each run.
        max_tool_concurrency: Parallelism of tool batches.
        output_type: Structured output (a pydantic model, dataclass or TypedDict):
            each run's final answer is validated into it (``RunResult.output``); a
            failed validation is a model error that ``model_retry`` may retry.
        retry_if: Opt-in narrowing of ``model_retry``: called with each model
            error, a False answer fails the run at once instead of retrying
            (``nbdurable.is_retryable`` uses the errors' classification). Without
            it every model error counts as retryable.
        approvers: Tool name -> the principals allowed to decide its calls'
            approvals (``{"drop_table": ["ana", "lee"]}``), enforced on every
            path that decides: a named HTTP token must be listed, a claimed name
            (notebook, CLI, Python API) is accepted only if listed, an approval
            link only if addressed to someone listed. A tool it does not name
            may be decided by anyone. Saved in each run's record at submission.
        submitter_may_approve: False: whoever submitted a run may not approve
            its calls (they may still deny them).
    """

    id: str
    model: Model
    tools: Sequence[Tool] | Mapping[str, Tool] = ()
    instructions: str | None = None
    version: str | None = None
    stream: bool | None = None
    tool_recovery: Mapping[str, str] = field(default_factory=dict)
    model_retry: ModelRetry | Mapping[str, int] | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    max_tool_concurrency: int | None = None
    output_type: Any = None
    retry_if: Callable[[BaseException], bool] | None = None
    approvers: Mapping[str, Sequence[str]] | None = None
    submitter_may_approve: bool = True

    def __post_init__(self) -> None:
        # where the user's code made it: its runs record the origin (see _origin)
        object.__setattr__(self, "_birthplace", birthplace())
        object.__setattr__(self, "_origin_memo", OriginMemo())  # what origin found last
        if self.stream is None:
            # frozen: resolve the default once, so the fingerprint sees a concrete bool
            # a model that wraps another may have ``stream`` yet say it cannot (can_stream)
            streams = callable(getattr(self.model, "stream", None))
            can = getattr(self.model, "can_stream", True)
            object.__setattr__(self, "stream", bool(streams and can))

    @classmethod
    def from_openai_agents(
        cls, agent: Any, *, version: str, model: Model | None = None, **options: Any
    ) -> Agent:
        """An OpenAI Agents SDK ``Agent`` as a durable agent; needs ``openai-agents``.

        Its name, instructions, function tools, handoffs (as sub-agent tools) and
        output type; ``model`` (default: the agent's model name as an
        ``OpenAIChatModel``); other ``Agent`` fields as ``options``. See
        :mod:`nbdurable._openai_agents` for what maps and what is refused.
        """
        from .._openai_agents import agent_fields

        return cls(**agent_fields(agent, model), version=version, **options)

    def __repr__(self) -> str:
        return f"Agent({self.id!r}, version={self.version!r})"

    @property
    def origin(self) -> str | None:
        """Where this definition lives, as its runs record it.

        ``module:attribute`` for an agent importable from a module,
        ``notebook NAME.ipynb, cell [N]`` for one defined in a notebook cell,
        else ``PATH, line N``; None when unknown.
        """
        place: Birthplace | None = getattr(self, "_birthplace", None)
        return agent_origin(self, place, getattr(self, "_origin_memo", None))

    def loop_options(self) -> AgentOptions:
        """The agent spec this agent defines (a run's leg adds the rest).

        ``nd.generate_text(messages=..., **agent.loop_options())`` runs it with the loop API.
        """
        return AgentOptions(
            model=self.model,
            tools=self.tools,
            instructions=self.instructions,
            max_steps=self.max_steps,
            max_tool_concurrency=self.max_tool_concurrency,
            output_type=self.output_type,
        )

    @property
    def tool_map(self) -> dict[str, Tool]:
        """The tools by name."""
        return normalize_tools(self.tools)

    @property
    def retry_policy(self) -> ModelRetry | None:
        """``model_retry`` as a :class:`ModelRetry`, or None when retry is off."""
        if self.model_retry is None or isinstance(self.model_retry, ModelRetry):
            return self.model_retry
        return ModelRetry(**dict(self.model_retry))

    def recovery_of(self, tool_name: str) -> ToolRecovery:
        """The recovery policy of a tool: ``tool_recovery``'s, else the tool's own, else manual."""
        policy = self.tool_recovery.get(tool_name)
        if policy is None:
            tool = self.tool_map.get(tool_name)
            policy = (tool.recovery if tool is not None else None) or "manual"
        return policy  # type: ignore[return-value]  # validated by validate() and Tool

    def validate(self) -> None:
        """Check the definition eagerly.

        Raises:
            ConfigurationError: A blank id or version, a model without
                ``generate`` (or without ``stream`` when ``stream=True``),
                invalid tools, an unknown tool or policy in ``tool_recovery``,
                an invalid ``model_retry`` or ``max_steps``.
        """
        if not isinstance(self.id, str) or not self.id.strip():
            raise ConfigurationError(f"an agent needs a nonblank id, not {self.id!r}")
        if not isinstance(self.version, str) or not self.version.strip():
            raise ConfigurationError(
                f"agent {self.id!r} needs a nonblank version (e.g. version='1'); "
                "bump it when the agent changes incompatibly"
            )
        if not callable(getattr(self.model, "generate", None)):
            raise ConfigurationError(f"agent {self.id!r}: {self.model!r} is not a Model")
        if self.stream and not callable(getattr(self.model, "stream", None)):
            raise ConfigurationError(
                f"agent {self.id!r} has stream=True but its model cannot stream"
            )
        tools = self.tool_map
        if not isinstance(self.tool_recovery, Mapping):
            raise ConfigurationError(f"agent {self.id!r}: tool_recovery must be a mapping")
        for name, policy in self.tool_recovery.items():
            if name not in tools:
                raise ConfigurationError(
                    f"agent {self.id!r}: tool_recovery names {name!r}, which is not one of "
                    f"its tools ({', '.join(sorted(tools)) or 'none'})"
                )
            if policy not in TOOL_RECOVERY:
                raise ConfigurationError(
                    f"agent {self.id!r}: recovery policy {policy!r} of {name!r} must be "
                    "'safe', 'idempotent' or 'manual'"
                )
        self.retry_policy  # noqa: B018 - validates model_retry
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int):
            raise ConfigurationError(f"agent {self.id!r}: max_steps must be an integer")
        if self.max_steps < 1:
            raise ConfigurationError(f"agent {self.id!r}: max_steps must be positive")
        OutputSpec.of(self.output_type)
        if self.retry_if is not None and not callable(self.retry_if):
            raise ConfigurationError(f"agent {self.id!r}: retry_if must be callable")
        self.approver_rule()
        if not isinstance(self.submitter_may_approve, bool):
            raise ConfigurationError(f"agent {self.id!r}: submitter_may_approve must be a bool")

    def approver_rule(self) -> dict[str, list[str]] | None:
        """``approvers`` as the run record keeps it (names sorted), or None without any.

        Raises:
            ConfigurationError: Not a mapping of tool names to nonblank name
                lists, an empty list, or a tool the agent does not have.
        """
        if self.approvers is None:
            return None
        if not isinstance(self.approvers, Mapping):
            raise ConfigurationError(
                f"agent {self.id!r}: approvers must map tool names to lists of names"
            )
        tools = self.tool_map
        rule: dict[str, list[str]] = {}
        for name, names in self.approvers.items():
            if name not in tools:
                raise ConfigurationError(
                    f"agent {self.id!r}: approvers names {name!r}, which is not one of "
                    f"its tools ({', '.join(sorted(tools)) or 'none'})"
                )
            if isinstance(names, str) or not isinstance(names, Sequence) or not names:
                raise ConfigurationError(
                    f"agent {self.id!r}: the approvers of {name!r} must be a non-empty "
                    f"list of names, not {names!r}"
                )
            for each in names:
                if not isinstance(each, str) or not each.strip():
                    raise ConfigurationError(
                        f"agent {self.id!r}: approver {each!r} of {name!r} is not a nonblank name"
                    )
            rule[name] = sorted({each.strip() for each in names})
        return rule

    def fingerprint(self) -> str:
        """A hash of what decides the agent's behaviour, in named parts.

        Deterministic across processes; :mod:`nbdurable.runtime._fingerprint`
        says what it covers and what it leaves out (what a run captures at
        submission, such as ``stream`` and ``max_steps``, is not in it).
        """
        return agent_fingerprint(self)

    def effective_recovery(self) -> dict[str, str]:
        """Every tool's recovery policy: its own, overridden by ``tool_recovery``."""
        own = {t.name: t.recovery for t in self.tool_map.values() if t.recovery is not None}
        return {**own, **self.tool_recovery}


def _definition(agent: Agent) -> tuple[Any, ...]:
    """What two registrations of one ``(id, version)`` must agree on.

    The fingerprint, and what runs capture at submission (so it is not part of
    the fingerprint, but one runtime's new submissions read it from its one
    registration): streaming, the step budget, the retry policy and who may decide.
    """
    retry = agent.retry_policy
    return (
        agent.fingerprint(),
        bool(agent.stream),
        agent.max_steps,
        retry.model_dump() if retry else None,
        agent.approver_rule(),
        agent.submitter_may_approve,
    )


class Registry:
    """The runtime's agents by ``(id, version)``; process-local, never persisted."""

    def __init__(self) -> None:
        self._agents: dict[tuple[str, str], Agent] = {}
        self._definitions: dict[tuple[str, str], Definition] = {}
        self._latest: dict[str, str] = {}

    def validate(self, batch: Iterable[Agent]) -> list[Agent]:
        """Validate a whole batch without adding anything.

        Raises:
            ConfigurationError: An invalid definition.
            DurableConflictError: An id repeated in the batch, or an ``(id,
                version)`` already registered with a different definition.
        """
        agents = list(batch)
        seen: set[str] = set()
        for agent in agents:
            if not isinstance(agent, Agent):
                raise ConfigurationError(f"not an Agent: {agent!r}")
            agent.validate()
            if agent.id in seen:
                raise DurableConflictError(f"agent id {agent.id!r} appears twice in the batch")
            seen.add(agent.id)
            key = (agent.id, str(agent.version))
            known = self._agents.get(key)
            if known is not None and _definition(known) != _definition(agent):
                raise DurableConflictError(
                    f"agent {agent.id!r} version {agent.version!r} is already registered with "
                    "a different definition; give the changed agent a new version"
                )
        return agents

    def register(self, batch: Iterable[Agent]) -> list[Agent]:
        """Validate the batch, then add it; an identical registration is kept as it is."""
        agents = self.validate(batch)
        for agent in agents:
            key = (agent.id, str(agent.version))
            if key not in self._agents:
                self._agents[key] = agent
                self._definitions[key] = Definition(agent)
                lifecycle.registered(agent.id, key[1], model_name(agent.model))
            self._latest[agent.id] = str(agent.version)
        return agents

    def get(self, agent_id: str, version: str | None = None) -> Agent | None:
        """The agent registered under ``(agent_id, version)``; the latest version when None."""
        version = version if version is not None else self._latest.get(agent_id)
        return None if version is None else self._agents.get((agent_id, version))

    def keys(self) -> list[tuple[str, str]]:
        """Every registered ``(id, version)``."""
        return list(self._agents)

    def definitions(self) -> dict[tuple[str, str], Definition]:
        """Every registered ``(id, version)``'s definition: what claims compare runs with."""
        return dict(self._definitions)

    def fingerprints(self) -> dict[tuple[str, str], str]:
        """The fingerprint of every registered ``(id, version)``."""
        return {key: found.fingerprint for key, found in self._definitions.items()}

    def fingerprint(self, agent_id: str, version: str) -> str | None:
        """The fingerprint of the registration ``(agent_id, version)``, or None."""
        found = self._definitions.get((agent_id, version))
        return None if found is None else found.fingerprint

    def ids(self) -> list[str]:
        """Registered agent ids."""
        return sorted(self._latest)

    def unknown(self, agent_id: object, where: str = "") -> ConfigurationError:
        """The error for an agent id not registered here: it names the registered ones."""
        known = self.ids()
        close = difflib.get_close_matches(agent_id, known, n=1) if isinstance(agent_id, str) else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listed = ", ".join(map(repr, known)) if known else "none yet (register one first)"
        return ConfigurationError(
            f"{where}no agent {agent_id!r} is registered{hint} (registered: {listed})"
        )

    def remove(self, agent_id: str) -> bool:
        """Forget every version of ``agent_id``; whether any existed."""
        keys = [key for key in self._agents if key[0] == agent_id]
        for key in keys:
            del self._agents[key]
            del self._definitions[key]
        self._latest.pop(agent_id, None)
        return bool(keys)
