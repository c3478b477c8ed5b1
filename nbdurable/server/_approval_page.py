"""The page behind an approval link, and the verdict its buttons send.

``GET /approve/{run_id}/{approval_id}?token=...`` shows the call (tool, arguments,
agent path, age) with Approve / Deny and an optional reason, an edit box for the
arguments when the tool allows edits (Approve with edits), and a Reply field (the
call's result in place of the tool); the buttons POST the link's token back to
the same path. Neither needs the bearer token: the signed
token binds the link to one call of one run, and a bad token is refused. The
page holds no secret (the token it sends is read from the address bar, not
written into the page) and everything it shows is escaped.
"""

from __future__ import annotations

import html
import json
import secrets
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse
from pydantic import BaseModel

from .._errors import NbdurableError
from ..durable._offload import offload
from ..durable._signer import token_issued_at
from ..messages import ToolApprovalRequest
from ..runs import check_decider
from ..runtime._run import Run
from ._context import Bridge
from ._errors import status_of
from ._handlers import error_responses
from ._links import answer, check_link_token, link_source, open_request, precheck_token
from ._schemas import VerdictIn

__all__ = ["LinkVerdictOut", "approval_page_router", "render_page"]


class LinkVerdictOut(BaseModel):
    """What became of a verdict sent from an approval link."""

    outcome: Literal["approved", "denied", "replied"]
    message: str


_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.3rem}dt{font-weight:600;margin-top:.6rem}dd{margin:0}
pre{background:#f4f4f4;padding:.6rem;overflow:auto;white-space:pre-wrap;word-break:break-word}
textarea{width:100%;box-sizing:border-box;min-height:3rem}
button{font-size:1rem;padding:.4rem 1.2rem;margin:.6rem .6rem 0 0;cursor:pointer}
#approve{background:#1a7f37;color:#fff;border:0}#deny{background:#cf222e;color:#fff;border:0}
#edited{font-family:ui-monospace,monospace;min-height:6rem}details{margin-top:1rem}
#outcome{margin-top:1rem;font-weight:600}.error{color:#cf222e}.muted{color:#666}
"""

_SCRIPT = """
const token = new URLSearchParams(window.location.search).get("token");
const outcome = document.getElementById("outcome");
const buttons = document.querySelectorAll("button");
function refuse(text) { outcome.textContent = text; outcome.className = "error"; }
async function send(kind) {
  const verdict = {approve: kind === "approve" || kind === "edit", token: token};
  if (kind === "deny") {
    verdict.reason = document.getElementById("reason").value.trim() || null;
  } else if (kind === "reply") {
    verdict.reply = document.getElementById("reply-text").value.trim();
    if (!verdict.reply) { refuse("write a reply first"); return; }
  } else if (kind === "edit") {
    try { verdict.arguments = JSON.parse(document.getElementById("edited").value); }
    catch (err) { refuse("the arguments are not JSON: " + err.message); return; }
  }
  buttons.forEach((b) => { b.disabled = true; });
  outcome.className = ""; outcome.textContent = "sending...";
  try {
    const response = await fetch(window.location.pathname, {
      method: "POST", credentials: "omit", cache: "no-store",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify(verdict),
    });
    const data = await response.json();
    if (response.ok) {
      outcome.textContent = data.message; outcome.dataset.state = data.outcome;
    } else {
      outcome.textContent = (data.error && data.error.message) || response.statusText;
      outcome.className = "error"; outcome.dataset.state = "refused";
      // nothing was recorded on a refused edit (422): the human may fix it and send again
      if (response.status === 422) { buttons.forEach((b) => { b.disabled = false; }); }
    }
  } catch (err) {
    outcome.textContent = "could not reach the server: " + err;
    outcome.className = "error"; outcome.dataset.state = "refused";
    buttons.forEach((b) => { b.disabled = false; });
  }
}
for (const kind of ["approve", "deny", "reply", "edit"]) {
  const button = document.getElementById(kind);
  if (button) { button.addEventListener("click", () => send(kind)); }
}
"""


def _age(now_ms: int, then_ms: int | None) -> str:
    if then_ms is None:
        return "unknown"
    seconds = max(0, (now_ms - then_ms) // 1000)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def _headers(nonce: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
        ),
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
    }


def _page(nonce: str, title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f'<title>{html.escape(title)}</title><style nonce="{nonce}">{_STYLE}</style>'
        f"</head><body>{body}</body></html>"
    )


def render_page(run_id: str, request: ToolApprovalRequest, now_ms: int, nonce: str) -> str:
    """The approval page of one pending call (everything shown is escaped)."""
    arguments = json.dumps(request.model_dump(mode="json")["input"], indent=2, ensure_ascii=False)
    path = " / ".join(request.agent_path) if request.agent_path else "(the run's own agent)"
    e = html.escape
    body = (
        f"<h1>Approve <code>{e(request.tool_name)}</code>?</h1>"
        '<p class="muted">An agent run waits for a human before it makes this call.</p>'
        f'<dl><dt>Tool</dt><dd id="tool"><code>{e(request.tool_name)}</code></dd>'
        f'<dt>Arguments</dt><dd><pre id="arguments">{e(arguments)}</pre></dd>'
        f'<dt>Agent path</dt><dd id="agent-path">{e(path)}</dd>'
        f"<dt>Run</dt><dd><code>{e(run_id)}</code></dd>"
        f"<dt>Approval</dt><dd><code>{e(request.approval_id)}</code></dd>"
        f'<dt>Asked</dt><dd id="age">{e(_age(now_ms, token_issued_at(request.token)))}</dd>'
        "</dl>"
        '<label for="reason">Reason (told to the model if you deny)</label>'
        '<textarea id="reason" maxlength="4000"></textarea>'
        '<div><button id="approve" type="button">Approve</button>'
        '<button id="deny" type="button">Deny</button></div>'
        f"{_edit_box(arguments) if request.allow_edit else ''}"
        "<details><summary>Reply instead of running the tool</summary>"
        '<label for="reply-text">Your answer (the model reads it as the call\'s result)</label>'
        '<textarea id="reply-text" maxlength="65536"></textarea>'
        '<div><button id="reply" type="button">Reply</button></div></details>'
        '<div id="outcome" role="status" aria-live="polite"></div>'
        f'<script nonce="{nonce}">{_SCRIPT}</script>'
    )
    return _page(nonce, f"Approve {request.tool_name}?", body)


def _edit_box(arguments: str) -> str:
    """The edit box of a tool that allows edits, prefilled with the model's arguments."""
    return (
        "<details><summary>Edit the arguments, then approve</summary>"
        '<label for="edited">Arguments (JSON; checked against the tool\'s schema)</label>'
        f'<textarea id="edited" spellcheck="false">{html.escape(arguments)}</textarea>'
        '<div><button id="edit" type="button">Approve with these arguments</button></div>'
        "</details>"
    )


def _refusal(error: NbdurableError, nonce: str) -> HTMLResponse:
    status = status_of(error)
    title = "This approval link does not work"
    body = (
        f"<h1>{html.escape(title)}</h1>"
        f'<p class="error" id="refusal">{html.escape(str(error))}</p>'
        f'<p class="muted">{html.escape(type(error).__name__)} ({status})</p>'
    )
    return HTMLResponse(_page(nonce, title, body), status_code=status, headers=_headers(nonce))


def approval_page_router(bridge: Bridge) -> APIRouter:
    """The approval link routes of ``bridge`` (no bearer token)."""
    router = APIRouter(tags=["approval links"])
    runtime = bridge.runtime

    @router.get(
        "/approve/{run_id}/{approval_id}",
        response_class=HTMLResponse,
        summary="The approval page of a link",
        responses={
            status: {"content": {"text/html": {}}, "description": text}
            for status, text in {
                200: "The page",
                403: "A bad token, or a link that may not decide this call",
                404: "No such run",
                409: "No longer pending",
                410: "An expired link",
            }.items()
        },
    )
    async def page(
        run_id: str,
        approval_id: str,
        token: Annotated[str, Query(max_length=65_536, description="The link's signed token")],
    ) -> HTMLResponse:
        """Show the call a link approves, with Approve / Deny buttons."""
        nonce = secrets.token_urlsafe(16)
        try:
            max_age = bridge.approval_max_age_ms
            precheck_token(
                runtime.signer, token, run_id=run_id, approval_id=approval_id, max_age_ms=max_age
            )
            request = await open_request(runtime, run_id, approval_id)
            check_link_token(runtime.signer, token, request, run_id=run_id, max_age_ms=max_age)
            # a link that may not decide this call says so before anyone clicks
            record = await offload(Run(runtime, run_id).record)
            source = link_source(runtime.signer, token)
            check_decider(record, approval_id, request.tool_name, source, approved=False)
        except NbdurableError as exc:
            return _refusal(exc, nonce)
        text = render_page(run_id, request, runtime.now(), nonce)
        return HTMLResponse(text, headers=_headers(nonce))

    @router.post(
        "/approve/{run_id}/{approval_id}",
        response_model=LinkVerdictOut,
        summary="The verdict of an approval link",
        responses=error_responses(
            {
                403: "A bad token, or a link not addressed to an allowed approver",
                404: "No such run",
                409: "No longer pending (`verdict`: the winner)",
                410: "An expired link: ask for a new one",
                422: "Edited arguments the tool does not allow, or that do not fit",
            }
        ),
    )
    async def verdict(run_id: str, approval_id: str, body: VerdictIn) -> LinkVerdictOut:
        """Approve (maybe with edited arguments), deny or reply to the link's call.

        The link's token is required for each.

        Recorded as given via a link addressed to whom the token names (a link
        proves no identity), minted by whom it names; with
        ``Agent(approvers=...)`` for the tool, only a link addressed to one of
        them, and minted by one of them (or their notification), may decide.
        """
        source = link_source(runtime.signer, body.token)
        outcome = await answer(
            bridge, run_id, approval_id, body, token_required=True, source=source
        )
        assert outcome.state in ("approved", "denied", "replied")
        return LinkVerdictOut(outcome=outcome.state, message=outcome.message)

    return router
