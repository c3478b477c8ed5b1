"""Which of a step's tool calls may run in the activity that called the model.

A step on Temporal costs one activity round trip through the server per
activity. When every call the model asked for would run unattended (no
approval gate, no client tool, no sub-agent, ``safe`` recovery), the
``nbdurable.model_step`` activity runs them right after the model's response is
journaled, and the workflow takes their results instead of scheduling a
``run_tool`` activity per call. The rule here is conservative: when in doubt
nothing runs early, and the workflow runs the calls as before. How they run (in
order, or up to ``max_tool_concurrency`` at once, a call that raised stopping
the ones not started) is :class:`nbdurable.temporal._step.StepDriver`'s.
"""

from __future__ import annotations

from ..loop._effects import ToolInvocation
from ..loop._options import LoopOptions
from ..loop._subagent import AgentTool
from ..models._base import ModelResponse
from ..runtime._agent import Agent
from ..tools import ToolArgumentsError

__all__ = ["early_calls"]


def early_calls(
    agent: Agent, options: LoopOptions, response: ModelResponse
) -> list[ToolInvocation]:
    """The calls of ``response`` the step machine is sure to run; none when one may wait.

    The machine runs a step's calls only when none of them waits for a human
    (an approval or a client tool), so one such call keeps all of them for the
    workflow to run. A call of an unknown tool or with invalid arguments is the
    machine's error result: it never runs, so it is left out without blocking
    the others. With ``prepare_step`` the step's tools may differ from the
    agent's: nothing runs early.
    """
    if options.prepare_step is not None or not response.tool_calls:
        return []
    invocations: list[ToolInvocation] = []
    for call in response.tool_calls:
        tool = options.tools.get(call.tool_name)
        if tool is None:
            continue
        try:
            kwargs = tool.validate_args(call.args)
        except ToolArgumentsError:
            continue
        if (
            tool.needs_approval is not False
            or tool.is_client_tool
            or isinstance(tool, AgentTool)
            or agent.recovery_of(call.tool_name) != "safe"
        ):
            return []
        invocations.append(ToolInvocation(tool=tool, call=call, kwargs=kwargs))
    return invocations
