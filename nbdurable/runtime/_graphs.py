"""Graphs of agent runs: ``runtime.submit_graph(nodes)``.

Every node of a graph IS a runtime run (a :class:`RuntimeRun` with ``graph_id``,
``node_id`` and ``depends_on``), so approvals, model retry, ``stream`` and
limits apply to it as to any run. A node with dependencies is ``queued`` until
they all complete; the store promotes it to ``pending`` in the same write that
completes its last dependency (:func:`~nbdurable.runs.settle_graph`).
When it starts, its dependencies' results are appended to its prompt as one
text part; media parts and user metadata are kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, RunEndedError, RunNotFoundError
from ..durable._offload import offload
from ..messages import Message, TextPart
from ..runs import GRAPH_STATUSES, TERMINAL_STATES, DependencyPolicy, RuntimeRun, graph_status
from ._agent import Registry
from ._prompts import Prompt, prompt_message, validate_prompt
from ._record_mirror import read_graph
from ._run import Run, RunFailedError, RunResult
from ._waiting import Deadline, wanted_states

if TYPE_CHECKING:
    from ._seam import RunControl

__all__ = [
    "DEPENDENCY_POLICIES",
    "GRAPH_STATUSES",
    "Graph",
    "GraphNode",
    "graph_status",
    "prompt_with_results",
    "validate_graph",
]

DEPENDENCY_POLICIES: frozenset[str] = frozenset({"fail", "pause"})


@dataclass(frozen=True)
class GraphNode:
    """One node of a graph: an agent run that starts after its dependencies complete.

    A plain dict with the same keys works too.

    Attributes:
        id: The node's id, unique in the graph (its run id is ``f"{graph_id}:{id}"``).
        agent: A registered agent id.
        prompt: A nonblank string or a user message (the shapes ``submit`` takes).
        depends_on: Ids of the nodes whose results it needs.
        on_dependency_failure: ``"fail"`` (default: the node fails with reason
            ``dependency_failed``) or ``"pause"`` (it waits in ``needs_attention``;
            retry the failed dependency and, once it completes, the node goes on).
        timeout: Seconds until the node's run fails with reason ``timeout``.
        max_steps: The node's step budget (default: the agent's).
    """

    id: str
    agent: str
    prompt: Prompt
    depends_on: Sequence[str] = ()
    on_dependency_failure: DependencyPolicy = "fail"
    timeout: float | None = None
    max_steps: int | None = None


def _node(value: Any) -> GraphNode:
    if isinstance(value, GraphNode):
        return value
    if isinstance(value, Mapping):
        try:
            return GraphNode(**value)
        except TypeError as exc:
            raise ConfigurationError(f"invalid graph node {dict(value)!r}: {exc}") from None
    raise ConfigurationError(f"a graph node is a GraphNode or a dict, not {value!r}")


def validate_graph(nodes: Iterable[Any], registry: Registry) -> list[GraphNode]:
    """Check a graph before anything is written; its nodes in a topological order.

    The order keeps the given order where dependencies allow it.

    Raises:
        ConfigurationError: No nodes, a blank or repeated node id, an unknown
            agent, an invalid prompt or policy, a dependency on an unknown node
            or on itself, or a cycle.
    """
    given = [_node(value) for value in nodes]
    if not given:
        raise ConfigurationError("a graph needs at least one node")
    by_id: dict[str, GraphNode] = {}
    checked: list[GraphNode] = []
    for node in given:
        if not isinstance(node.id, str) or not node.id.strip():
            raise ConfigurationError(f"a graph node needs a nonblank id, not {node.id!r}")
        if node.id in by_id:
            raise ConfigurationError(f"node id {node.id!r} appears twice in the graph")
        if not isinstance(node.agent, str) or registry.get(node.agent) is None:
            raise registry.unknown(node.agent, f"node {node.id!r}: ")
        if node.on_dependency_failure not in DEPENDENCY_POLICIES:
            raise ConfigurationError(
                f"node {node.id!r}: on_dependency_failure must be 'fail' or 'pause', "
                f"not {node.on_dependency_failure!r}"
            )
        if isinstance(node.depends_on, str):
            raise ConfigurationError(f"node {node.id!r}: depends_on is a list of node ids")
        node = GraphNode(
            node.id,
            node.agent,
            validate_prompt(node.prompt),
            tuple(node.depends_on),
            node.on_dependency_failure,
            node.timeout,
            node.max_steps,
        )
        by_id[node.id] = node
        checked.append(node)
    for node in checked:
        for dep in node.depends_on:
            if dep == node.id:
                raise ConfigurationError(f"node {node.id!r} depends on itself")
            if dep not in by_id:
                raise ConfigurationError(f"node {node.id!r} depends on unknown node {dep!r}")
    ordered: list[GraphNode] = []
    placed: set[str] = set()
    remaining = list(checked)
    while remaining:
        ready = [n for n in remaining if all(d in placed for d in n.depends_on)]
        if not ready:
            cycle = ", ".join(n.id for n in remaining)
            raise ConfigurationError(f"the graph has a cycle among nodes {cycle}")
        for node in ready:
            ordered.append(node)
            placed.add(node.id)
        remaining = [n for n in remaining if n.id not in placed]
    return ordered


def prompt_with_results(prompt: Prompt, results: Sequence[tuple[str, str]]) -> Message:
    """A node's first message: its prompt with its dependencies' results appended.

    The results become one text part after the prompt's own parts; media parts
    and the message's metadata are kept as they are.

    Args:
        prompt: The node's prompt.
        results: ``(node id, result text)`` of each dependency, in order.
    """
    message = prompt_message(prompt)
    if not results:
        return message
    blocks = [f"Result of {node_id}:\n{text}" for node_id, text in results]
    # Starts on a new paragraph: ``Message.text`` joins text parts as they are.
    text = "\n\nResults of the steps this one depends on:\n\n" + "\n\n".join(blocks)
    return Message(
        role=message.role,
        content=(*message.content, TextPart(text=text)),
        metadata=message.metadata,
    )


class Graph:
    """A handle on a graph of runs. Cheap: it holds only the runtime and the graph id."""

    def __init__(self, runtime: RunControl, graph_id: str) -> None:
        self.runtime = runtime
        self.graph_id = graph_id

    def __repr__(self) -> str:
        return f"Graph({self.graph_id!r})"

    def records(self) -> list[RuntimeRun]:
        """The nodes' run records, in submission (topological) order.

        Raises:
            RunNotFoundError: The store has no such graph.
        """
        records = read_graph(self.runtime, self.graph_id)
        if not records:
            raise RunNotFoundError(self.graph_id)
        return records

    @property
    def nodes(self) -> dict[str, Run]:
        """Each node's run handle, by node id."""
        return {r.node_id or r.run_id: Run(self.runtime, r.run_id) for r in self.records()}

    def node(self, node_id: str) -> Run:
        """The run of one node.

        Raises:
            RunNotFoundError: The graph has no such node.
        """
        run = self.nodes.get(node_id)
        if run is None:
            raise RunNotFoundError(f"{self.graph_id}:{node_id}")
        return run

    @property
    def status(self) -> str:
        """The graph's status (see :func:`graph_status`)."""
        return graph_status(self.records())

    async def wait(self, *statuses: str, timeout: float | None = None) -> str:
        """Wait until the graph's status is one of ``statuses``; return it.

        Args:
            *statuses: Graph statuses (see :func:`graph_status`) to return on;
                none means any final one (``completed``, ``failed``, ``cancelled``).
            timeout: Seconds to wait at most (None: as long as it takes).

        Raises:
            RunEndedError: The graph is final in a status not among ``statuses``
                (its ``run_id`` is the graph id; ``reason`` the first unsuccessful
                node's reason).
            TimeoutError: ``timeout`` passed first.
            ConfigurationError: A name that is not a graph status.
            RunNotFoundError: The store has no such graph.
        """
        wanted = wanted_states(statuses, GRAPH_STATUSES)
        deadline = Deadline(timeout)
        while True:
            records = await offload(self.records)
            status = graph_status(records)
            if status in wanted:
                return status
            if status in TERMINAL_STATES:
                reason = next((r.reason for r in records if r.state != "completed"), None)
                raise RunEndedError(self.graph_id, status, reason=reason, wanted=tuple(statuses))
            pause = deadline.pause(self.runtime.poll_interval, f"graph {self.graph_id!r}", status)
            await asyncio.sleep(pause)

    async def result(self) -> dict[str, RunResult]:
        """Wait for every node to finish; each node's result, by node id.

        Raises:
            RunFailedError: A node failed or was cancelled (the first one).
        """
        await self.wait()
        records = await offload(self.records)
        for record in records:
            if record.state != "completed":
                raise RunFailedError(record)
        return {r.node_id or r.run_id: await Run(self.runtime, r.run_id).result() for r in records}

    async def cancel(self) -> None:
        """Cancel every unfinished node (downstream nodes first)."""
        for record in reversed(await offload(self.records)):
            if record.state not in TERMINAL_STATES:
                await Run(self.runtime, record.run_id).cancel()
