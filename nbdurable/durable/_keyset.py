"""Approval key sets: several named HMAC keys, one of them current.

A key set lets the approval secret be rotated without voiding tokens already
handed out. Where a secret is read as text (``NBDURABLE_APPROVAL_SECRET``, the
0600 key file), a key set is a JSON object::

    {"current": "k2", "keys": {"k2": "<new secret>", "k1": "<old secret>"}}

``keys`` lists the keys newest first; ``current`` (optional, defaulting to the
first key) names the key that signs. Tokens without a key id, issued before the
rotation, verify with the last (oldest) key. Any other text is one unnamed
secret, as before key sets existed. Text that starts with ``{`` is always read as
a key set, so a garbled one fails loudly instead of becoming a secret.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigurationError

__all__ = ["KeySet", "parse_secret_text"]

_KEY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, repr=False)
class KeySet:
    """Named HMAC keys (newest first) and the one that signs.

    Attributes:
        keys: ``(key id, key bytes)`` pairs, newest first; the id is None for
            the single unnamed key of the one-secret form.
        current: Index into ``keys`` of the signing key.
    """

    keys: tuple[tuple[str | None, bytes], ...]
    current: int

    def __repr__(self) -> str:
        return f"KeySet(ids={[kid for kid, _ in self.keys]!r})"

    @property
    def current_id(self) -> str | None:
        """The id of the signing key (None for the unnamed key)."""
        return self.keys[self.current][0]

    @property
    def legacy_id(self) -> str | None:
        """The key that verifies tokens carrying no key id: the oldest one."""
        return self.keys[-1][0]


def single_key(secret: str | bytes) -> KeySet:
    """The one-secret form: a single unnamed key."""
    return KeySet(((None, _key_bytes(secret, "the approval secret")),), 0)


def named_keys(keys: Mapping[str, str | bytes], current: str | None) -> KeySet:
    """A key set from ``{id: secret}`` (newest first) and the current id.

    Raises:
        ConfigurationError: No keys, an id that is not ``[A-Za-z0-9._-]``
            (64 characters at most, starting alphanumeric), an empty secret,
            or ``current`` not among the keys.
    """
    if not isinstance(keys, Mapping) or not keys:
        raise ConfigurationError("an approval key set needs at least one key")
    pairs: list[tuple[str | None, bytes]] = []
    for kid, secret in keys.items():
        if not isinstance(kid, str) or not _KEY_ID.match(kid):
            raise ConfigurationError(
                f"approval key id {kid!r} is not valid: letters, digits, '.', '_' "
                "or '-', starting with a letter or digit, at most 64 characters"
            )
        if not isinstance(secret, (str, bytes)):
            raise ConfigurationError(f"approval key {kid!r}: the secret must be a string")
        pairs.append((kid, _key_bytes(secret, f"approval key {kid!r}")))
    ids = [kid for kid, _ in pairs]
    if current is None:
        index = 0
    elif current in ids:
        index = ids.index(current)
    else:
        raise ConfigurationError(f"current approval key {current!r} is not in the key set {ids}")
    return KeySet(tuple(pairs), index)


def parse_secret_text(text: str, *, source: str, strip: bool = True) -> KeySet:
    """Read a secret as found in the environment or the key file.

    Args:
        text: The text.
        source: Where it came from, for error messages (never the text itself).
        strip: Whether surrounding whitespace is not part of a single secret
            (the key file's); the environment's secret is taken as it is.

    Raises:
        ConfigurationError: Empty text, or text starting with ``{`` that is
            not a valid key set (bad JSON, a repeated key id, unknown fields,
            a non-string secret, an unknown ``current``).
    """
    if not text.strip().startswith("{"):
        secret = text.strip() if strip else text
        if not secret:
            raise ConfigurationError(f"{source}: the approval secret must not be empty")
        return single_key(secret)
    text = text.strip()
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise ConfigurationError(f"{source}: an approval key set is ambiguous: {exc}") from None
    except (ValueError, RecursionError) as exc:
        # the message names the position only: the text holds secrets
        detail = (
            f" (line {exc.lineno}, column {exc.colno})"
            if isinstance(exc, json.JSONDecodeError)
            else ""
        )
        raise ConfigurationError(
            f"{source}: an approval key set must be a JSON object like "
            '{"current": "k2", "keys": {"k2": "...", "k1": "..."}}' + detail
        ) from None
    if not isinstance(raw, dict) or set(raw) - {"current", "keys"} or "keys" not in raw:
        raise ConfigurationError(
            f"{source}: an approval key set has the fields 'keys' (required) and "
            "'current' (optional), nothing else"
        )
    current = raw.get("current")
    if current is not None and not isinstance(current, str):
        raise ConfigurationError(f"{source}: 'current' must be a key id")
    if not isinstance(raw["keys"], dict):
        raise ConfigurationError(f"{source}: 'keys' must be an object of key id to secret")
    try:
        return named_keys(raw["keys"], current)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{source}: {exc}") from None


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for name, value in pairs:
        if name in seen:
            raise _DuplicateKey(f"the name {name!r} appears twice")
        seen[name] = value
    return seen


def _key_bytes(secret: str | bytes, what: str) -> bytes:
    key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if not key:
        raise ConfigurationError(f"{what} must not be empty")
    return key
