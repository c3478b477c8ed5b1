"""Content-addressed message chains, shared by the SQL stores.

A history of n messages is stored as n nodes; node i holds message i and points
at node i-1. A node's id is ``sha256(parent id + message JSON)``, so the id of
the last node (the *head*) names the whole history: two histories with a common
prefix share the prefix's nodes, and a save only writes the nodes it adds.
"""

from __future__ import annotations

import hashlib
import operator
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from .._errors import StoreCorruptionError
from ..history import History
from ..messages import Message
from ._trusted import trusted_messages

__all__ = [
    "Chain",
    "ChainCache",
    "NodeRow",
    "decode_messages",
    "encode_message",
    "extend_chain",
    "identical_prefix",
    "known_prefix",
    "node_id",
    "verify_chain",
]

NodeRow = tuple[bytes, bytes | None, str]
"""``(id, parent id or None at the root, message JSON)``: one stored node."""

_MESSAGES: TypeAdapter[tuple[Message, ...]] = TypeAdapter(tuple[Message, ...])


def encode_message(message: Message) -> str:
    """The message's JSON as the codec writes it (image bytes as base64)."""
    return message.model_dump_json()


def node_id(parent: bytes | None, message_json: str) -> bytes:
    """The 32-byte id of a node: ``sha256(parent id + message JSON)``."""
    digest = hashlib.sha256(parent or b"")
    digest.update(message_json.encode())
    return digest.digest()


def identical_prefix(old: Sequence[Message], new: Sequence[Message]) -> int:
    """How many leading messages ``new`` shares with ``old`` as the very same objects.

    The loop builds each history from the previous one, so object identity finds
    the common prefix without encoding a single message.
    """
    # The usual case, ``new`` extends ``old``, checked at C speed: a Python loop
    # over a long history costs a save more than its SQL does.
    if len(new) >= len(old) and all(map(operator.is_, old, new)):
        return len(old)
    same = map(operator.is_, old, new)
    count = 0
    for flag in same:
        if not flag:
            break
        count += 1
    return count


def known_prefix(
    cached: Chain | None, messages: Sequence[Message], extends: Sequence[Message] | None
) -> int:
    """How many leading messages of ``messages`` the cached chain already names.

    ``extends`` is the saver's promise that ``messages`` begins with the very
    objects of that history (the loop appends to the history it saved last).
    When it is the cached history itself, or ``messages`` is a
    :class:`~nbdurable.History` grown from the cached one, the answer takes no
    scan; otherwise the histories are compared object by object.
    """
    if cached is None:
        return 0
    if extends is not None and extends is cached.messages and len(messages) >= len(extends):
        return len(extends)
    if isinstance(messages, History) and messages.extends(cached.messages):
        return len(cached.messages)
    return identical_prefix(cached.messages, messages)


def extend_chain(
    parent: bytes | None, messages: Sequence[Message]
) -> tuple[list[bytes], list[NodeRow]]:
    """Ids and rows of the nodes that append ``messages`` below ``parent``."""
    ids: list[bytes] = []
    rows: list[NodeRow] = []
    for message in messages:
        text = encode_message(message)
        nid = node_id(parent, text)
        ids.append(nid)
        rows.append((nid, parent, text))
        parent = nid
    return ids, rows


def verify_chain(
    rows: Sequence[NodeRow], head: bytes | None, count: int, *, run_id: str, step_index: int
) -> None:
    """Check rows read root-first against the checkpoint's head and message count.

    Raises:
        StoreCorruptionError: A node is missing, out of place or does not hash to its id.
    """
    where = f"run {run_id!r} step {step_index}"
    if len(rows) != count:
        raise StoreCorruptionError(
            f"broken message chain in {where}: expected {count} messages, found {len(rows)}",
            run_id=run_id,
            step_index=step_index,
        )
    parent: bytes | None = None
    for position, (nid, stored_parent, text) in enumerate(rows):
        # A damaged row can come back with another type (a BLOB for the text).
        if not isinstance(text, str) or stored_parent != parent or node_id(parent, text) != nid:
            raise StoreCorruptionError(
                f"message {position} of {where} does not match its content hash",
                run_id=run_id,
                step_index=step_index,
            )
        parent = nid
    if parent != head:
        raise StoreCorruptionError(
            f"broken message chain in {where}: it does not end at the checkpoint's head",
            run_id=run_id,
            step_index=step_index,
        )


def decode_messages(
    texts: Sequence[str], *, run_id: str, step_index: int, verified: bool = False
) -> tuple[Message, ...]:
    """Validate stored message JSON in one pass (one parser call for the whole history).

    With ``verified`` (every text hashed to its node id just before), the usual
    shapes are built without validating them again (:mod:`.trusted`).

    Raises:
        StoreCorruptionError: A message does not match the schema.
    """
    if verified and (built := trusted_messages(texts)) is not None:
        return built
    try:
        messages = _MESSAGES.validate_json("[" + ",".join(texts) + "]")
    except ValidationError as exc:
        raise StoreCorruptionError(
            f"a message of run {run_id!r} step {step_index} does not decode: {exc}",
            run_id=run_id,
            step_index=step_index,
        ) from exc
    if len(messages) != len(texts):  # a text held more or less than one message
        raise StoreCorruptionError(
            f"the messages of run {run_id!r} step {step_index} do not decode one per node",
            run_id=run_id,
            step_index=step_index,
        )
    return messages


@dataclass(frozen=True)
class Chain:
    """A history this process saved or loaded, with its node ids.

    ``ids[i]`` is the id of the node of ``messages[i]``, so it names ``messages[: i + 1]``.
    A run's next chain may extend ``ids`` in place (no copy of a long run's ids
    per save); only the first ``len(messages)`` ids belong to this chain.
    """

    messages: Sequence[Message]
    ids: list[bytes]

    def grown(self, known: int, messages: Sequence[Message], new_ids: list[bytes]) -> Chain:
        """The chain of ``messages``: its first ``known`` ids are this chain's, then ``new_ids``."""
        if known == len(self.messages) == len(self.ids):
            self.ids.extend(new_ids)  # this chain is being replaced: its ids list moves on
            return Chain(messages, self.ids)
        return Chain(messages, [*self.ids[:known], *new_ids])

    def head(self) -> bytes | None:
        """The id naming the whole history (None for an empty one)."""
        count = len(self.messages)
        return self.ids[count - 1] if count else None

    def prefix(self, head: bytes | None, count: int) -> tuple[Message, ...] | None:
        """The first ``count`` messages when ``head`` names them, else None."""
        if count == 0:
            return () if head is None else None
        if count <= len(self.messages) and self.ids[count - 1] == head:
            return tuple(self.messages[:count])  # a slice is a tuple already: no copy
        return None


class ChainCache:
    """The last chain seen per run, bounded (least recently used runs are dropped).

    Ids are content hashes, so a cached chain never goes stale in meaning; it
    may only name nodes another process has since deleted, which the stores check.
    """

    def __init__(self, max_runs: int = 256) -> None:
        self._max_runs = max_runs
        self._chains: OrderedDict[str, Chain] = OrderedDict()

    def get(self, run_id: str) -> Chain | None:
        """The run's cached chain, if any."""
        chain = self._chains.get(run_id)
        if chain is not None:
            self._chains.move_to_end(run_id)
        return chain

    def put(self, run_id: str, chain: Chain) -> None:
        """Remember the run's latest chain."""
        self._chains[run_id] = chain
        self._chains.move_to_end(run_id)
        while len(self._chains) > self._max_runs:
            self._chains.popitem(last=False)

    def drop(self, run_id: str) -> None:
        """Forget a run."""
        self._chains.pop(run_id, None)

    def messages(self, run_id: str, head: bytes | None, count: int) -> tuple[Message, ...] | None:
        """The ``count`` messages ``head`` names: from the run's own chain, else :meth:`find`."""
        own = self.get(run_id)
        found = own.prefix(head, count) if own is not None else None
        return found if found is not None else self.find(head, count)

    def find(self, head: bytes | None, count: int) -> tuple[Message, ...] | None:
        """Messages of any cached chain that ``head`` names (forks share prefixes)."""
        for chain in reversed(self._chains.values()):
            found = chain.prefix(head, count)
            if found is not None:
                return found
        return None
