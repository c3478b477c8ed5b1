"""HMAC-signed approval tokens (standard library only).

A token is ``v1.<payload>.<mac>``: the payload is base64url (no padding) of
compact, key-sorted JSON holding the full approval request, an optional
``run_id`` binding and ``issued_at`` (epoch ms); the MAC is HMAC-SHA256 over the
payload segment, base64url without padding. The payload is encoded, not
encrypted: anyone holding a token can read the request it approves.

A signer holds one unnamed key or a set of named keys (see ``keyset``). With
named keys the payload carries ``kid``, the id of the key that signed it, so a
verifier accepts the token only with that key; a token without ``kid`` (signed
before the keys were named) verifies with the unnamed or else the oldest key.

The secret stays in the process that signs and verifies: never put it in a
widget, a notebook, an event or a checkpoint.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._deps import Clock, SystemClock
from .._errors import ConfigurationError
from ..messages import ToolApprovalRequest
from ._keyset import KeySet, named_keys, parse_secret_text, single_key

__all__ = [
    "SECRET_ENV_VAR",
    "TOKEN_DENIAL_REASON",
    "UNSIGNED_FIELDS",
    "ApprovalSigner",
    "bound_to_run",
    "store_signer",
    "expired_age",
    "link_claims",
    "link_token",
    "request_still_signed",
    "resign_if_expired",
    "token_issued_at",
    "token_matches",
]

SECRET_ENV_VAR = "NBDURABLE_APPROVAL_SECRET"
TOKEN_DENIAL_REASON = "Approval token missing, invalid, expired, or bound to another run."
_PREFIX = "v1"


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    if not text or any(c not in _B64_ALPHABET for c in text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_B64_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


class ApprovalSigner:
    """Signs approval requests and verifies the tokens that come back.

    Args:
        secret: The HMAC key (one unnamed key). When neither ``secret`` nor
            ``keys`` is given, ``NBDURABLE_APPROVAL_SECRET`` is used: one
            secret, or a key set in JSON (``{"current": "k2", "keys":
            {"k2": "...", "k1": "..."}}``).
        keys: Named keys ``{key id: secret}``, newest first, for rotation.
            A key absent from ``keys`` is retired: its tokens no longer verify.
            Tokens without a key id verify with the last (oldest) key.
        current: The id of the key that signs; defaults to the first of ``keys``.
        clock: Object with ``now()`` in epoch ms; defaults to the wall clock.

    Raises:
        ConfigurationError: No secret was given and the environment has none,
            a secret is empty, both ``secret`` and ``keys`` were given, or the
            key set is not valid.
    """

    def __init__(
        self,
        secret: str | bytes | None = None,
        *,
        keys: Mapping[str, str | bytes] | None = None,
        current: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        if keys is not None:
            if secret is not None:
                raise ConfigurationError("ApprovalSigner takes secret= or keys=, not both")
            keyset = named_keys(keys, current)
        elif current is not None:
            raise ConfigurationError("ApprovalSigner(current=...) needs keys=...")
        elif secret is None:
            env = os.environ.get(SECRET_ENV_VAR)
            if not env:
                raise ConfigurationError(
                    f"ApprovalSigner needs a secret: pass secret=..., set {SECRET_ENV_VAR}, "
                    "or use ApprovalSigner.from_file(path)."
                )
            keyset = parse_secret_text(env, source=SECRET_ENV_VAR, strip=False)
        else:
            keyset = single_key(secret)
        self._keys: KeySet = keyset
        self.clock: Clock = clock or SystemClock()

    def __repr__(self) -> str:
        if self._keys.current_id is None:
            return "ApprovalSigner(secret=<hidden>)"
        ids = [kid for kid, _ in self._keys.keys]
        return f"ApprovalSigner(keys={ids!r} <secrets hidden>, current={self._keys.current_id!r})"

    @property
    def _key(self) -> bytes:
        # the signing key's bytes, for tests that check it never leaks
        return self._keys.keys[self._keys.current][1]

    @property
    def key_ids(self) -> tuple[str | None, ...]:
        """The ids of the keys that verify, newest first (None: the unnamed key)."""
        return tuple(kid for kid, _ in self._keys.keys)

    @property
    def current_key_id(self) -> str | None:
        """The id of the key that signs (None: the unnamed key)."""
        return self._keys.current_id

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, clock: Clock | None = None
    ) -> ApprovalSigner:
        """Use the secret or key set in ``path``, creating it (mode 0600) on first use.

        ``NBDURABLE_APPROVAL_SECRET``, when set, takes precedence over the file.
        The file holds one secret, or a key set in JSON (see the class).
        """
        env = os.environ.get(SECRET_ENV_VAR)
        if env:
            keyset = parse_secret_text(env, source=SECRET_ENV_VAR, strip=False)
            return cls._from_keyset(keyset, clock)
        file = Path(path)
        if not file.exists():
            file.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass  # another process created it first; read theirs
            else:
                with os.fdopen(fd, "w") as handle:
                    handle.write(secrets.token_urlsafe(32))
        keyset = parse_secret_text(file.read_text(), source=f"approval key file {file}")
        return cls._from_keyset(keyset, clock)

    @classmethod
    def _from_keyset(cls, keyset: KeySet, clock: Clock | None) -> ApprovalSigner:
        signer = cls.__new__(cls)
        signer._keys = keyset
        signer.clock = clock or SystemClock()
        return signer

    def sign(self, request: ToolApprovalRequest, run_id: str | None = None) -> str:
        """Return a token for ``request``, bound to ``run_id`` when given."""
        payload: dict[str, Any] = request.model_dump(mode="json", exclude=UNSIGNED_FIELDS)
        if run_id is not None:
            payload["run_id"] = run_id
        return self.sign_payload(payload)

    def sign_payload(self, payload: dict[str, Any]) -> str:
        """Return a token for any JSON object (``issued_at`` is added).

        Other signed things (a standing approval) carry a ``kind`` key so
        that their tokens can never pass for an approval request's.
        """
        payload = {**payload, "issued_at": int(self.clock.now())}
        kid, key = self._keys.keys[self._keys.current]
        if kid is None:
            payload.pop("kid", None)
        else:
            payload["kid"] = kid
        segment = _b64encode(
            json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
                "utf-8"
            )
        )
        return f"{_PREFIX}.{segment}.{_mac(key, segment)}"

    def verify(self, token: object, max_age_ms: int | None = None) -> dict[str, Any] | None:
        """Return the signed payload, or None for a garbled, forged or expired token.

        A token whose age is >= ``max_age_ms`` is expired; with ``max_age_ms=None``
        tokens never expire. The key that verifies must be the one the payload
        names (``kid``), or for a payload without one the unnamed or oldest key.
        Never raises.
        """
        try:
            if not isinstance(token, str):
                return None
            prefix, segment, mac = token.split(".")
            if prefix != _PREFIX:
                return None
            # the MAC is checked before the payload is parsed, with every key
            # not retired; the payload must then name the key that matched
            signed_by = [
                kid for kid, key in self._keys.keys if hmac.compare_digest(mac, _mac(key, segment))
            ]
            if not signed_by:
                return None
            payload = json.loads(_b64decode(segment).decode("utf-8"))
            if not isinstance(payload, dict):
                return None
            if "kid" in payload:
                if not isinstance(payload["kid"], str) or payload["kid"] not in signed_by:
                    return None
            elif self._keys.legacy_id not in signed_by:
                return None
            issued_at = payload.get("issued_at")
            if not isinstance(issued_at, int) or isinstance(issued_at, bool):
                return None
            if max_age_ms is not None and int(self.clock.now()) - issued_at >= max_age_ms:
                return None
            return payload
        except (ValueError, TypeError, UnicodeDecodeError, binascii.Error, RecursionError):
            # RecursionError: json.loads on a deeply nested payload (verify never raises)
            return None


UNSIGNED_FIELDS: set[str] = {"token", "allow_edit", "parameters"}
"""Fields of a request its token does not sign: the token itself, and what a human may
do with the call (edit it), which is not part of the call: a token binds the call as
the model made it, and keeps the form it had before editing existed."""


def _mac(key: bytes, segment: str) -> str:
    digest = hmac.new(key, segment.encode("ascii"), hashlib.sha256).digest()
    return _b64encode(digest)


def token_matches(
    signer: ApprovalSigner,
    token: str | None,
    request: ToolApprovalRequest,
    *,
    run_id: str | None,
    max_age_ms: int | None,
) -> bool:
    """Whether ``token`` may approve ``request``: four checks, plus the pin.

    1. the MAC verifies; 2. the approval id matches; 3. the token is younger
    than ``max_age_ms`` when set; 4. when both the call's ``run_id`` (the
    session's, also for a request raised inside a sub-agent) and the token's
    are present, they match (:func:`bound_to_run`). The token also pins the
    request: its tool call id, tool name, input and agent path must equal the
    pending call's.
    """
    payload = signer.verify(token, max_age_ms=max_age_ms)
    if payload is None:
        return False
    if payload.get("approval_id") != request.approval_id:
        return False
    if payload.get("tool_name") != request.tool_name:
        return False
    if payload.get("tool_call_id") != request.tool_call_id:
        return False
    pinned = request.model_dump(mode="json")
    if payload.get("input") != pinned["input"]:
        return False
    if payload.get("agent_path", []) != pinned["agent_path"]:
        return False
    token_run = payload.get("run_id")
    return run_id is None or token_run is None or bound_to_run(payload, run_id)


def request_still_signed(signer: ApprovalSigner, request: ToolApprovalRequest) -> bool:
    """Whether ``request``'s own (stored) token still verifies with ``signer``, at any age.

    False for a request signed with a key since retired (or never signed):
    such a request can only be denied, so no fresh token or link is signed
    for it and no approval of it is recorded (docs/core.md, "Rotating the
    approval secret"). An expired token still counts: a fresh one is signed
    for a request parked past the maximum age.
    """
    return request.token is not None and token_matches(
        signer, request.token, request, run_id=None, max_age_ms=None
    )


_LINK_CLAIMS = ("to", "minted_by", "minted_via")


def link_token(
    signer: ApprovalSigner,
    request: ToolApprovalRequest,
    run_id: str,
    *,
    to: str | None = None,
    minted_by: str | None = None,
    minted_via: str | None = None,
) -> str:
    """The token of an approval link: ``request`` bound to ``run_id``, signed now.

    Whom the link is addressed to (``to``) and who minted it, how
    (``minted_by``, ``minted_via``), are signed into it: its verdict records
    them. It does not check who may mint (see
    :func:`~nbdurable.runs.check_minter`).
    """
    payload: dict[str, Any] = request.model_dump(mode="json", exclude=UNSIGNED_FIELDS)
    payload["run_id"] = run_id
    for key, value in zip(_LINK_CLAIMS, (to, minted_by, minted_via), strict=True):
        if value is not None:
            payload[key] = value
    return signer.sign_payload(payload)


def link_claims(signer: ApprovalSigner, token: object) -> dict[str, str | None]:
    """``to``, ``minted_by`` and ``minted_via`` of a verified link token (None: not there).

    All None for a token that does not verify.
    """
    payload = signer.verify(token) or {}
    claims: dict[str, str | None] = {}
    for key in _LINK_CLAIMS:
        value = payload.get(key)
        claims[key] = value if isinstance(value, str) else None
    return claims


def bound_to_run(payload: dict[str, Any], run_id: str) -> bool:
    """Whether a verified token's payload is bound to ``run_id``.

    The token names the session's run id (for a request raised inside a
    sub-agent too). Tokens signed before sub-agent requests were bound that way
    name the sub-agent's checkpoint key, ``{run_id}::{agent}#{call}`` of the
    first agent of the request's (pinned) agent path; they stay valid.
    """
    token_run = payload.get("run_id")
    if token_run == run_id:
        return True
    path = payload.get("agent_path")
    return (
        isinstance(token_run, str)
        and isinstance(path, list)
        and bool(path)
        and token_run.startswith(f"{run_id}::{path[0]}#")
    )


def expired_age(signer: ApprovalSigner, token: object, max_age_ms: int | None) -> int | None:
    """The age (ms) of a token that verifies but is ``max_age_ms`` old or older, else None.

    None also for a token that does not verify at all (forged, garbled, absent):
    only a genuine token can be "expired", so the answer can say "ask for a new one".
    """
    if max_age_ms is None:
        return None
    payload = signer.verify(token)
    if payload is None or signer.verify(token, max_age_ms=max_age_ms) is not None:
        return None
    return int(signer.clock.now()) - int(payload["issued_at"])


def resign_if_expired(
    signer: ApprovalSigner, request: ToolApprovalRequest, max_age_ms: int | None
) -> ToolApprovalRequest:
    """``request`` with a freshly signed token when its own verifies but is too old.

    The new token signs the same request with the same run binding; only
    ``issued_at`` changes. A token that does not verify is left as it is.
    For the process holding the secret, showing a parked request again.
    """
    if expired_age(signer, request.token, max_age_ms) is None:
        return request
    bound = (signer.verify(request.token) or {}).get("run_id")
    token = signer.sign(
        request.model_copy(update={"token": None}),
        run_id=bound if isinstance(bound, str) else None,
    )
    return request.model_copy(update={"token": token})


_HOME_KEY = Path.home() / ".nbdurable" / "approval.key"


def store_signer(store: object) -> ApprovalSigner:
    """The signer whose secret belongs with ``store``, as the runtime finds it.

    ``NBDURABLE_APPROVAL_SECRET`` when set; else a 0600 file created on first
    use: beside a SQLite or JSONL store, ``~/.nbdurable/approval.key`` for a
    PostgreSQL store (workers on several machines need the environment
    variable); for an in-memory store one secret per store object.
    """
    from .store import PERSISTENT, HistoryStore, supports  # deferred: an import cycle

    if os.environ.get(SECRET_ENV_VAR):
        return ApprovalSigner()
    path = store.location if isinstance(store, HistoryStore) else None
    if path is not None:
        return ApprovalSigner.from_file(path.parent / "approval.key")
    if supports(store, PERSISTENT):  # a server store: one file per machine
        return ApprovalSigner.from_file(_HOME_KEY)
    with _memory_lock:  # in memory: every runtime on this store object shares one secret
        secret = _memory_secrets.get(store)
        if secret is None:
            secret = _memory_secrets[store] = secrets.token_urlsafe(32)
    return ApprovalSigner(secret)


_memory_secrets: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
_memory_lock = threading.Lock()


def token_issued_at(token: object) -> int | None:
    """When a token says it was issued (epoch ms), read WITHOUT verifying it.

    For display (a pending approval's age); never a basis for trusting it.
    """
    try:
        if not isinstance(token, str):
            return None
        payload = json.loads(_b64decode(token.split(".")[1]).decode("utf-8"))
        issued = payload.get("issued_at") if isinstance(payload, dict) else None
        return issued if isinstance(issued, int) and not isinstance(issued, bool) else None
    except (ValueError, TypeError, IndexError, UnicodeDecodeError, binascii.Error, RecursionError):
        return None
