"""Approvals inside one leg: new requests (signed), and verdicts for recorded ones."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from ..durable._signer import TOKEN_DENIAL_REASON, token_matches
from ..messages import ToolApprovalRequest, ToolApprovalResponse
from ..runs import Grant
from ._effects import ToolInvocation
from ._options import LoopOptions
from ._start import LegStart

__all__ = ["DEFAULT_DENIAL_REASON", "NO_VERDICT_REASON", "Approvals"]

NO_VERDICT_REASON = "No verdict was given for this approval request; denied by default."
DEFAULT_DENIAL_REASON = "Denied by user."


class Approvals:
    """The approval side of one leg: what a request looks like, what a verdict settles.

    Args:
        options: The leg's options (its approval responses, signer and max age).
        start: Where the leg starts (its run id, and the approvals its checkpoint knows).
    """

    def __init__(self, options: LoopOptions, start: LegStart) -> None:
        self.options = options
        self.start = start
        self._responses = {r.approval_id: r for r in options.approval_responses}
        self._warned_unchecked = False

    @property
    def session_run_id(self) -> str | None:
        """The run id tokens bind: the session's, also inside a sub-agent."""
        return self.options.session_run_id or self.start.run_id

    def warn_unmatched(self, recorded: Iterable[ToolApprovalRequest]) -> None:
        """Log each approval response that matches no pending approval.

        Args:
            recorded: Requests recorded on the history's trailing assistant message.
        """
        if not self._responses or self.options.depth > 0:
            return  # sub-agents see their parent's verdicts for every level
        known = set(self.start.known_approvals)
        known.update(r.approval_id for r in recorded)
        for approval_id in self._responses.keys() - known:
            self.options.deps.logger.warning(
                "nbdurable: ignoring approval response %s: it matches no pending approval",
                approval_id,
            )

    def verdict(self, request: ToolApprovalRequest) -> ToolApprovalResponse:
        """Settle one recorded request from this leg's approval responses."""
        options = self.options
        response = self._responses.get(request.approval_id)
        if response is None:
            return ToolApprovalResponse(
                approval_id=request.approval_id, approved=False, reason=NO_VERDICT_REASON
            )
        deny = functools.partial(
            ToolApprovalResponse,
            approval_id=request.approval_id,
            approved=False,
            source=response.source,
        )
        if not response.approved:
            if response.reply is not None:  # answered in place of the tool
                return deny(reply=response.reply)
            return deny(reason=response.reason or DEFAULT_DENIAL_REASON)
        if options.approval_signer is None and request.token is not None:
            self._warn_unchecked(request)
        if options.approval_signer is not None and not token_matches(
            options.approval_signer,
            response.token,
            request,
            run_id=self.session_run_id,
            max_age_ms=options.approval_max_age_ms,
        ):
            return deny(reason=TOKEN_DENIAL_REASON)
        # the token binds the call as the model made it (checked above); edited
        # arguments travel beside it, and the batch checks them against the tool
        return ToolApprovalResponse(
            approval_id=request.approval_id,
            approved=True,
            source=response.source,
            arguments=response.arguments,
        )

    def _warn_unchecked(self, request: ToolApprovalRequest) -> None:
        """Approvals are honoured without a signer; say so (once a leg) when they were signed."""
        if self._warned_unchecked:
            return
        self._warned_unchecked = True
        self.options.deps.logger.warning(
            "nbdurable: run %s: approving signed requests (first: %s) without approval_signer: "
            "their tokens are not checked; pass approval_signer= to verify them",
            self.start.run_id,
            request.approval_id,
        )

    def covering_grant(self, invocation: ToolInvocation) -> Grant | None:
        """The standing approval that covers a gated call now, verified; None when none does.

        Only a signed grant bound to the session's run, for this tool, this
        agent path and these arguments, not expired (by the leg's clock) and
        not revoked covers a call; without a signer nothing does.
        """
        options = self.options
        signer, run_id = options.approval_signer, self.session_run_id
        if signer is None or run_id is None:
            return None
        grants = options.approval_grants
        current = grants() if callable(grants) else grants
        return current.covering(
            signer,
            run_id=run_id,
            tool=invocation.call.tool_name,
            arguments=invocation.call.args,
            agent_path=options.agent_path,
            now=int(options.deps.clock.now()),
        )

    def new_request(self, invocation: ToolInvocation) -> ToolApprovalRequest:
        """A new (unsigned) approval request for a gated call.

        A tool that allows edits says so on the request, with its schema, so a
        front end can offer a form (neither is signed).
        """
        tool = invocation.tool
        return ToolApprovalRequest(
            approval_id=f"approval_{self.options.deps.generate_id()}",
            tool_call_id=invocation.call.tool_call_id,
            tool_name=invocation.call.tool_name,
            input=dict(invocation.call.args),
            agent_path=self.options.agent_path,
            allow_edit=tool.allow_edit,
            parameters=dict(tool.parameters) if tool.allow_edit else None,
        )

    def signed(self, request: ToolApprovalRequest) -> ToolApprovalRequest:
        """``request`` with the signer's token (unchanged without a signer, or if signing fails)."""
        signer = self.options.approval_signer
        if signer is None:
            return request
        try:
            token = signer.sign(request, run_id=self.session_run_id if self.start.durable else None)
        except Exception as exc:  # best-effort: unsigned requests are denied on resume
            self.options.deps.logger.error(
                "nbdurable: signing approval %s failed: %r", request.approval_id, exc
            )
            return request
        return request.model_copy(update={"token": token})
