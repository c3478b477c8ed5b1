"""Notifications: tell a webhook when a run starts waiting on a human.

A :class:`Notifier` posts one JSON message per approval a run waits for (and
one when a run needs attention) to a URL: a Slack-compatible ``text`` plus
structured fields. Each message is signed with HMAC-SHA256 so the receiver can
check it came from here::

    X-Nbdurable-Timestamp: <unix seconds>
    X-Nbdurable-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>

The notify secret is not the approval secret. Before sending, the process
claims the message in the store (:meth:`RuntimeStore.rt_claim_notices`): of
all workers that see a run start waiting, exactly one sends each message.
Delivery runs on a thread (never on the event loop), with a timeout and a
bounded number of attempts with backoff; a failure is logged and never
affects the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from .._errors import ConfigurationError
from ..durable._signer import link_token, request_still_signed
from ..messages import ToolApprovalRequest
from ..runs import HUMAN_STATES, RuntimeRun, check_minter

if TYPE_CHECKING:
    from ._seam import RunControl

__all__ = [
    "NOTIFY_SECRET_ENV_VAR",
    "Notifier",
    "notification_signature",
    "verify_notification",
]

NOTIFY_SECRET_ENV_VAR = "NBDURABLE_NOTIFY_SECRET"
"""The run states a notifier reports."""

logger = logging.getLogger("nbdurable.notify")

_ARGS_IN_TEXT = 400  # characters of the arguments shown in ``text``


def notification_signature(secret: str | bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Nbdurable-Signature`` value for ``body`` sent at ``timestamp``."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    mac = hmac.new(key, timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify_notification(
    secret: str | bytes,
    timestamp: str,
    body: bytes,
    signature: str,
    *,
    tolerance_s: float = 300.0,
    now: float | None = None,
) -> bool:
    """Whether a received notification is genuine and recent (for receivers in Python).

    Args:
        secret: The notify secret shared with the sender.
        timestamp: The ``X-Nbdurable-Timestamp`` header.
        body: The raw request body, exactly as received.
        signature: The ``X-Nbdurable-Signature`` header.
        tolerance_s: The largest accepted difference from ``now``, against replays.
        now: Unix seconds; defaults to the wall clock.
    """
    try:
        sent = int(timestamp)
    except (TypeError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - sent) > tolerance_s:
        return False
    expected = notification_signature(secret, timestamp, body)
    return hmac.compare_digest(expected.encode(), str(signature).encode())


class Notifier:
    """Posts a signed message when a run starts waiting on a human.

    Pass it to :class:`~nbdurable.runtime.DurableRuntime` as ``notify=``;
    ``nbdurable serve --notify-url`` and ``nbdurable worker --notify-url``
    make one.

    Args:
        url: Where to POST (http or https).
        secret: The HMAC key of the ``X-Nbdurable-Signature`` header; defaults
            to ``NBDURABLE_NOTIFY_SECRET``. Required: a receiver must be able
            to tell a genuine message from a forged one.
        public_url: The HTTP bridge's public base URL. When set (and
            ``include_links``), each approval message carries a signed link
            that approves or denies that one call (a bearer credential: send
            it only to a channel whose members may decide); for a call the
            agent's ``approvers`` reserve, one link addressed to each of them.
        include_links: False leaves links out even with ``public_url``.
        timeout: Seconds each attempt may take.
        attempts: How many times a message is tried before it is given up (logged).
        backoff: Seconds before the second attempt; doubled after each failure.

    Raises:
        ConfigurationError: A URL that is not http(s), no secret, or bad numbers.
    """

    def __init__(
        self,
        url: str,
        *,
        secret: str | bytes | None = None,
        public_url: str | None = None,
        include_links: bool = True,
        timeout: float = 5.0,
        attempts: int = 4,
        backoff: float = 0.5,
    ) -> None:
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
            raise ConfigurationError(f"the notify URL must be http(s)://..., not {url!r}")
        if not urlsplit(url).hostname:
            raise ConfigurationError(f"the notify URL {url!r} names no host")
        if secret is None:
            secret = os.environ.get(NOTIFY_SECRET_ENV_VAR) or None
        if not secret:
            raise ConfigurationError(
                f"notifications are signed: pass secret=... or set {NOTIFY_SECRET_ENV_VAR} "
                "(a key shared with the receiver, not the approval secret)"
            )
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigurationError(f"attempts must be an integer >= 1, not {attempts!r}")
        if not timeout > 0 or backoff < 0:
            raise ConfigurationError("timeout must be positive and backoff not negative")
        self.url = url
        self._secret = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        self.public_url = public_url.rstrip("/") if public_url else None
        self.include_links = include_links
        self.timeout = float(timeout)
        self.attempts = attempts
        self.backoff = float(backoff)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="nbdurable-notify")
        self._inflight: set[Future[None]] = set()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Notifier({self.url!r}, secret=<hidden>, links={self.links})"

    @property
    def links(self) -> bool:
        """Whether approval messages carry a signed link."""
        return self.include_links and self.public_url is not None

    def schedule(self, runtime: RunControl, record: RuntimeRun) -> None:
        """Send what ``record`` (just written) calls for, on a thread. Never raises."""
        if record.state not in HUMAN_STATES:
            return
        try:
            future = self._pool.submit(self._deliver, runtime, record)
        except RuntimeError:  # the interpreter is shutting down
            return
        with self._lock:
            self._inflight.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future[None]) -> None:
        with self._lock:
            self._inflight.discard(future)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until the messages scheduled so far are sent or given up; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                pending = list(self._inflight)
            if not pending:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            # a message's failure is logged where it happens
            with contextlib.suppress(Exception):
                pending[0].result(timeout=left)

    async def aclose(self, timeout: float | None = None) -> None:
        """Wait for the messages in flight (off the event loop)."""
        await asyncio.to_thread(self.drain, timeout)

    # -- on the notifier's threads -----------------------------------------------------

    def _deliver(self, runtime: RunControl, record: RuntimeRun) -> None:
        try:
            messages = self._messages(runtime, record)
        except Exception as exc:  # a notification never affects the run
            logger.error("nbdurable: notification for run %s not sent: %r", record.run_id, exc)
            return
        for key, payload in messages:
            self._post(record.run_id, key, payload)

    def _messages(
        self, runtime: RunControl, record: RuntimeRun
    ) -> list[tuple[str, dict[str, Any]]]:
        if record.state == "needs_attention":
            key = f"needs_attention@{record.fence}"
            if not runtime.runtime_store.rt_claim_notices(record.run_id, [key]):
                return []
            return [(key, _attention_payload(record))]
        checkpoint = runtime.store.load(record.run_id)
        if asyncio.iscoroutine(checkpoint):
            checkpoint = asyncio.run(checkpoint)
        requests = [
            r
            for r in (checkpoint.pending_approvals if checkpoint is not None else ())
            if r.approval_id not in record.verdicts
        ]
        if not requests:
            return []
        claimed = set(
            runtime.runtime_store.rt_claim_notices(record.run_id, [r.approval_id for r in requests])
        )
        messages = []
        for request in requests:
            if request.approval_id in claimed:
                links = self._links(runtime, record, request)
                messages.append((request.approval_id, _approval_payload(record, request, links)))
        return messages

    def _links(
        self, runtime: RunControl, record: RuntimeRun, request: ToolApprovalRequest
    ) -> dict[str | None, str]:
        """The links of a message: one unaddressed, or one addressed to each approver.

        A call the run's approvers reserve gets a link addressed to each of
        them (the notifier addresses approvers only); another call one link.
        A request whose own token no longer verifies (a retired key) gets none.
        """
        if not self.links or not request_still_signed(runtime.signer, request):
            return {}
        approvers = _approvers(record, request.tool_name)
        names: list[str | None] = [*approvers] if approvers else [None]
        links: dict[str | None, str] = {}
        for name in names:
            to = check_minter(
                record,
                request.approval_id,
                request.tool_name,
                minted_by=None,
                via="notify",
                to=name,
            )
            # the bridge's link format (nbdurable.server._links.link_for), signed now
            token = link_token(runtime.signer, request, record.run_id, to=to, minted_via="notify")
            run, approval = quote(record.run_id, safe=""), quote(request.approval_id, safe="")
            links[to] = f"{self.public_url}/approve/{run}/{approval}?token={quote(token, safe='')}"
        return links

    def _post(self, run_id: str, key: str, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8")
        delay = self.backoff
        error = "no attempt"
        for attempt in range(1, self.attempts + 1):
            timestamp = str(int(time.time()))
            request = urllib.request.Request(
                self.url,
                data=body,
                method="POST",
                headers={
                    "Content-Type": "application/json; charset=utf-8",
                    "User-Agent": "nbdurable-notify",
                    "X-Nbdurable-Timestamp": timestamp,
                    "X-Nbdurable-Signature": notification_signature(self._secret, timestamp, body),
                    "X-Nbdurable-Delivery": f"{run_id}/{key}",
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read()
                logger.info("nbdurable: notified %s of run %s (%s)", self.url, run_id, key)
                return
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code}"
            except Exception as exc:  # refused, timed out, reset, ...
                error = repr(exc)
            if attempt < self.attempts:
                logger.warning(
                    "nbdurable: notification for run %s (%s) attempt %d failed: %s; retrying",
                    run_id,
                    key,
                    attempt,
                    error,
                )
                time.sleep(delay)
                delay *= 2
        logger.error(
            "nbdurable: notification for run %s (%s) failed after %d attempts: %s; "
            "the run is not affected",
            run_id,
            key,
            self.attempts,
            error,
        )


def _approvers(record: RuntimeRun, tool: str) -> list[str] | None:
    """Who may decide calls of ``tool``, when the run names them."""
    approvers = getattr(record, "approvers", None)
    if isinstance(approvers, Mapping):
        approvers = approvers.get(tool)
    if isinstance(approvers, (list, tuple)) and all(isinstance(a, str) for a in approvers):
        return list(approvers)
    return None


def _approval_payload(
    record: RuntimeRun, request: ToolApprovalRequest, links: Mapping[str | None, str]
) -> dict[str, Any]:
    arguments = request.model_dump(mode="json")["input"]
    shown = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    if len(shown) > _ARGS_IN_TEXT:
        shown = shown[: _ARGS_IN_TEXT - 1] + "…"
    approvers = _approvers(record, request.tool_name)
    agent = " / ".join([record.agent_id, *request.agent_path])
    lines = [f"Run `{record.run_id}` (agent `{agent}`) waits for approval of `{request.tool_name}`"]
    lines.append(f"arguments: `{shown}`")
    if approvers:
        lines.append("may decide: " + ", ".join(approvers))
    for to, url in links.items():
        lines.append(f"<{url}|Approve or deny as {to}>" if to else f"<{url}|Approve or deny>")
    payload: dict[str, Any] = {
        "text": "\n".join(lines),
        "event": "waiting_approval",
        "run_id": record.run_id,
        "agent": record.agent_id,
        "agent_version": record.agent_version,
        "agent_path": list(request.agent_path),
        "approval_id": request.approval_id,
        "tool_call_id": request.tool_call_id,
        "tool": request.tool_name,
        "arguments": arguments,
        "approvers": approvers,
        "waiting_since": record.updated_at,
    }
    if None in links:
        payload["link"] = links[None]
    elif links:  # a reserved call: one link addressed to each approver
        payload["links"] = {to: url for to, url in links.items() if to is not None}
    return payload


def _attention_payload(record: RuntimeRun) -> dict[str, Any]:
    reason = record.reason or "needs attention"
    return {
        "text": f"Run `{record.run_id}` (agent `{record.agent_id}`) needs attention: {reason}",
        "event": "needs_attention",
        "run_id": record.run_id,
        "agent": record.agent_id,
        "agent_version": record.agent_version,
        "reason": record.reason,
        "waiting_since": record.updated_at,
    }
