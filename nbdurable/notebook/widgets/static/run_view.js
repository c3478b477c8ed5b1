// nbdurable run view (anywidget ESM): the live view of one run.
// Reads the synced traits the kernel sets (status, step, usage, approvals, error,
// started_at, ended_at, max_steps, progress, summary, lease_until, lease_owner, stalled,
// following, snapshot) and sends custom messages (docs/notebook.md, "Widget messages"):
// a verdict per card click, a ping (kernel_link.js), and a snapshot request when the
// front end's model is created. The card's token is the request's signed token; the
// secret never reaches here.
//
// A card keeps the two common answers one click away (Approve, Deny; Deny then takes an
// optional reason) and puts the rarer ones beside them: Edit… (only when the tool allows
// it: a form from the tool's JSON schema, prefilled with the model's arguments, see
// verdict_forms.js) and Reply… (text the model reads as the call's result instead).
//
// Steps arrive as deltas numbered in sequence (type "steps"), where a changed step is
// whole when new, else {index, ...fields that changed}, its grown text as {append}.
// The model (initialize, once per front-end model, whether or not a view shows it)
// applies the delta that follows the one it has, asks for a snapshot when it is created
// and when one is missing, and keeps the `snapshot` trait current on the front end
// (set locally, never sent back): that is what the widget manager saves in a notebook,
// so the kernel never sends the whole run again once a front end composes it. Views
// render the model's `snapshot` and redraw only the steps whose object changed.
//
// A view whose kernel is gone (restarted, or a notebook reopened from its saved
// widget state) says "disconnected" and disables its buttons: it never looks live.

const FINISHED = new Set(["completed", "failed", "cancelled", "error"]);
const TROUBLE = new Set(["failed", "error", "needs_attention", "cancelled"]);
const OPEN_CARD = new Set(["pending", "invalid token", "stale", "error", "sending"]);
const ANSWERABLE = new Set(["pending", "invalid token", "error"]);

function h(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function json(value) {
  try {
    return JSON.stringify(value);
  } catch (_err) {
    return String(value);
  }
}

function argsLine(name, args) {
  const parts = Object.entries(args || {}).map(([k, v]) => `${k}=${json(v)}`);
  return `${name}(${parts.join(", ")})`;
}

function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  return `${Math.floor(m / 60)}h ${m % 60}m`;
}

function clockTime(ms) {
  // "12:03" today, "2024-05-02 12:03" another day (local time)
  const at = new Date(ms);
  const pad = (n) => String(n).padStart(2, "0");
  const time = `${pad(at.getHours())}:${pad(at.getMinutes())}`;
  const today = new Date();
  if (at.toDateString() === today.toDateString()) return time;
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ${time}`;
}

function usageLine(usage) {
  if (!usage || !usage.total_tokens) return "no tokens yet";
  return `${usage.input_tokens} in + ${usage.output_tokens} out = ${usage.total_tokens} tokens`;
}

function leaseLine(owner, until) {
  const left = Math.max(0, Math.ceil((until - Date.now()) / 1000));
  if (!left) return `the lease of its previous owner (${owner}) lapsed: a runtime serving its agent takes it over`;
  return `waits for the lease of its previous owner (${owner}) to lapse (up to ${left} s), then goes on`;
}

function renderToolCall(call, awaiting, denied) {
  const box = h("details", "nbd-tool");
  const summary = h("summary", "nbd-tool-summary");
  summary.append(h("code", "", argsLine(call.tool_name, call.args)));
  let mark = call.state || (call.done ? (call.is_error ? "error" : "done") : "running");
  if (!call.done && awaiting.has(call.tool_call_id)) mark = "awaiting approval";
  const refused = call.done && call.is_error && denied.has(call.tool_call_id);
  if (refused) mark = "denied"; // a person said no: not an error of the tool
  summary.append(h("span", `nbd-tool-state nbd-state-${mark.replace(/ /g, "-")}`, mark));
  box.append(summary);
  box.append(h("div", "nbd-label", "arguments"));
  box.append(h("pre", "nbd-pre", JSON.stringify(call.args || {}, null, 2)));
  if (call.done) {
    box.append(h("div", "nbd-label", "result"));
    const result = typeof call.result === "string" ? call.result : JSON.stringify(call.result, null, 2);
    const tone = refused ? " nbd-denied-text" : call.is_error ? " nbd-error-text" : "";
    box.append(h("pre", `nbd-pre${tone}`, result));
  }
  return box;
}

function renderStep(step, awaiting, denied) {
  const block = h("div", "nbd-step");
  block.dataset.index = String(step.index);
  const head = h("div", "nbd-step-head", `step ${step.index}`);
  if (step.attempts > 1) head.append(h("span", "nbd-note", ` · attempt ${step.attempts}`));
  block.append(head);
  if (step.text) {
    const text = h("div", step.streaming ? "nbd-text nbd-streaming" : "nbd-text", step.text);
    block.append(text);
  }
  for (const call of step.forming_calls || []) block.append(renderFormingCall(call));
  for (const call of step.tool_calls || []) block.append(renderToolCall(call, awaiting, denied));
  return block;
}

function renderFormingCall(call) {
  // a tool call the model is still writing: its name and the JSON arguments so far
  const box = h("div", "nbd-tool nbd-forming");
  box.dataset.callId = call.tool_call_id;
  box.append(h("code", "", `${call.tool_name}(`));
  box.append(h("code", "nbd-forming-args nbd-streaming", call.args_text));
  box.append(h("span", "nbd-tool-state nbd-state-running", "forming"));
  return box;
}

function patched(old, patch) {
  // a new step comes whole; a known one as {index, ...changed fields, append}
  if (!old) return patch;
  const step = { ...old };
  for (const [key, value] of Object.entries(patch)) {
    if (key === "append") step.text = (old.text || "") + value;
    else step[key] = value;
  }
  return step;
}

function answeredCard(card) {
  // one line: "✓ drop_table(name="t") approved at 12:03"; an edit says what ran instead,
  // a reply what the model was told
  const box = h("div", `nbd-card nbd-card-collapsed nbd-card-${card.state.replace(/ /g, "-")}`);
  const sign = { approved: "✓", denied: "✗", replied: "↩" }[card.state] || "·";
  box.append(h("span", "nbd-card-sign", sign));
  box.append(h("code", "nbd-card-call", argsLine(card.tool_name, card.args)));
  let line = card.state === "resolved" ? "no longer pending" : card.state;
  if (card.state === "approved" && card.edited_args) line = "edited and approved";
  if (card.decided_at) line += ` at ${clockTime(card.decided_at)}`;
  if (card.state === "denied" && card.reason) line += `: ${card.reason}`;
  if (card.state === "replied" && card.reply) line += `: ${card.reply}`;
  box.append(h("span", "nbd-card-outcome", line));
  if (card.state === "approved" && card.edited_args) {
    box.append(h("code", "nbd-card-edited", `ran as ${argsLine(card.tool_name, card.edited_args)}`));
  }
  // who decided, and how long after the request: "by ana (claimed), 2 min after the request"
  if (card.decided_by) box.append(h("span", "nbd-card-who", card.decided_by));
  return box;
}

function composeSteps(model) {
  // the steps this front end holds, composed from the kernel's deltas and snapshots and
  // kept in the model's `snapshot` (set locally: the widget manager saves it with the
  // notebook; a steps object that did not change keeps its identity, so views redraw
  // only what changed)
  const saved = model.get("snapshot");
  let seq = saved && typeof saved.seq === "number" ? saved.seq : -1;
  let known = new Map(((saved && saved.steps) || []).map((step) => [step.index, step]));
  let asked = false; // a snapshot was asked for and has not come yet
  let mine = saved; // the value this composer set last (its own change events are skipped)
  const publish = () => {
    mine = { seq, steps: [...known.values()].sort((a, b) => a.index - b.index) };
    model.set("snapshot", mine); // local: no save_changes, nothing goes to the kernel
  };
  const load = (snapshot) => {
    seq = snapshot.seq;
    known = new Map((snapshot.steps || []).map((step) => [step.index, step]));
    publish();
  };
  const ask = () => {
    if (asked) return;
    asked = true;
    try {
      model.send({ type: "snapshot" });
    } catch (_err) {
      // no kernel (a notebook reopened from its saved state): the saved snapshot stays
    }
  };
  const onDelta = (msg) => {
    if (msg.seq <= seq) return; // a snapshot had it already
    if (msg.seq !== seq + 1) return ask(); // one went missing (or this model is new)
    seq = msg.seq;
    for (const index of msg.removed || []) known.delete(index);
    for (const patch of msg.changed || []) {
      const step = patched(known.get(patch.index), patch);
      known.set(step.index, step);
    }
    publish();
  };
  const onMessage = (msg) => {
    if (msg && msg.type === "steps") onDelta(msg);
    else if (msg && msg.type === "snapshot") {
      asked = false;
      if (msg.seq >= seq) load(msg);
    }
  };
  const fromKernel = () => {
    // the kernel synced the trait (it does only while no front end has asked it for a
    // snapshot, e.g. before this model's request reached it)
    const snapshot = model.get("snapshot");
    if (snapshot === mine) return;
    if (snapshot && typeof snapshot.seq === "number" && snapshot.seq >= seq) {
      seq = snapshot.seq; // the kernel's is as new or newer: it is the model's value now
      known = new Map((snapshot.steps || []).map((step) => [step.index, step]));
      mine = snapshot;
    } else if (seq >= 0) publish(); // an older one: keep what this front end composed
  };
  model.on("msg:custom", onMessage);
  model.on("change:snapshot", fromKernel);
  ask(); // the steps since the saved snapshot, or all of them for a model created late
  return () => {
    model.off("msg:custom", onMessage);
    model.off("change:snapshot", fromKernel);
  };
}

function render({ model, el }) {
  const root = h("div", "nbd-run");
  const header = h("div", "nbd-header");
  const badge = h("span", "nbd-badge");
  const runId = h("span", "nbd-run-id");
  const progress = h("span", "nbd-progress");
  const elapsed = h("span", "nbd-elapsed");
  const tokens = h("span", "nbd-live-tokens");
  header.append(badge, runId, progress, tokens, elapsed);
  const summary = h("div", "nbd-summary");
  const live = h("div", "nbd-live");
  const cards = h("div", "nbd-cards");
  // the steps scroll inside a capped box that stays at the newest text (a flex column in
  // reverse: the browser keeps its end in sight as text grows, unless the reader scrolls up)
  const scroller = h("div", "nbd-steps");
  const steps = h("div", "nbd-steps-inner");
  scroller.append(steps);
  root.append(header, summary, live, cards, scroller);
  // one line when another runtime took the run over (the run_taken_over event)
  const takeover = h("div", "nbd-takeover");
  summary.after(takeover);
  // a call a worker that had lost the run finished anyway (tool_late_result): said
  // above the cards and steps, before anyone retries the call
  const late = h("div", "nbd-late");
  takeover.after(late);
  // a needs_attention stop: Retry or Settle (deny with a reason), signed like a verdict
  const attention = h("div", "nbd-attention");
  late.after(attention);
  let settling = null; // the reason being typed once Settle was clicked (null: not asked)
  el.append(root);
  const reasons = new Map();
  const askingCards = new Map(); // approval id -> "deny" (its reason), "grant" (confirm), "edit", "reply"
  const editDrafts = new Map(); // approval id -> Map(argument -> what was typed)
  const replyDrafts = new Map(); // approval id -> the reply being typed
  let known = new Map(); // index -> step, as this view drew it (the model's objects)
  const clicked = new Set(); // cards clicked here whose answer has not come back yet
  const undelivered = new Set(); // cards clicked here whose click reached no kernel

  // -- is the kernel there? (kernelLink, from kernel_link.js) -----------------------------
  const link = kernelLink(model, {
    onState: (state) => {
      if (state === "disconnected") {
        for (const id of clicked) undelivered.add(id);
        clicked.clear();
      }
      live_();
      cards_();
      header_();
      attention_();
    },
    onLive: () => live_(),
    onAck: (id) => undelivered.delete(id),
  });
  const onMessage = (msg) => {
    // the model (composeSteps) applies steps and snapshots: here they say the kernel is there
    if (msg && (msg.type === "steps" || msg.type === "snapshot")) link.alive();
  };

  // -- rendering ---------------------------------------------------------------------------
  const tick = () => {
    const started = model.get("started_at");
    const ended = model.get("ended_at");
    if (started && (ended || link.state !== "disconnected")) {
      elapsed.textContent = `elapsed ${duration((ended || Date.now()) - started)}`;
    } else {
      elapsed.textContent = ""; // a disconnected view cannot know how long it has been
    }
    for (const node of cards.querySelectorAll(".nbd-age")) {
      const at = Number(node.dataset.requestedAt);
      if (!at) node.textContent = "";
      else if (link.state === "disconnected") node.textContent = `asked at ${clockTime(at)}`;
      else node.textContent = `asked ${duration(Date.now() - at)} ago`;
    }
    if (model.get("lease_until") && !FINISHED.has(model.get("status"))) summary_();
  };
  const header_ = () => {
    // a running run whose owner stopped shows as stalled (the summary says why)
    const status = model.get("stalled") ? "stalled" : model.get("status");
    badge.textContent = status;
    badge.className = `nbd-badge nbd-status-${status}`;
    runId.textContent = model.get("run_id");
    progress.textContent = model.get("progress") || `step ${model.get("step")}`;
    progress.title = usageLine(model.get("usage")); // the token split, on hover
    tick();
  };
  const summary_ = () => {
    const status = model.get("status");
    const until = model.get("lease_until");
    let text = model.get("summary") || "";
    if (until && !FINISHED.has(status)) {
      text = leaseLine(model.get("lease_owner"), until);
    }
    summary.textContent = text;
    const trouble = TROUBLE.has(status) || model.get("stalled");
    summary.className = `nbd-summary${trouble ? " nbd-summary-trouble" : ""}`;
    summary.style.display = text && text !== status ? "" : "none"; // the badge says it already
  };
  const live_ = () => {
    let text = "";
    if (link.state === "disconnected") {
      // re-running a %%agent cell re-attaches to its run only while it is unfinished
      const show = `%durable show ${model.get("run_id")}`;
      text = FINISHED.has(model.get("status"))
        ? `disconnected: ${show} shows this run again`
        : `disconnected: re-run the cell to follow this run again, or ${show}`;
    } else if (link.busy) {
      text = "the kernel is busy: this view goes on when the running cell ends";
    }
    live.textContent = text;
    live.className = link.state === "disconnected" ? "nbd-live nbd-disconnected" : "nbd-live";
    live.style.display = text ? "" : "none";
    root.classList.toggle("nbd-run-disconnected", link.state === "disconnected");
    root.dataset.kernel = link.state; // checking | live | disconnected
  };

  const openCard = (card) => {
    const box = h("div", `nbd-card nbd-card-${card.state.replace(/ /g, "-")}`);
    box.append(h("div", "nbd-card-title", "Approval needed"));
    box.append(h("code", "nbd-card-call", argsLine(card.tool_name, card.args)));
    const meta = h("div", "nbd-card-meta");
    if (card.agent_path && card.agent_path.length) {
      meta.append(h("span", "", `sub-agent: ${card.agent_path.join(" › ")}`));
    }
    const age = h("span", "nbd-age", "");
    age.dataset.requestedAt = String(card.requested_at || 0);
    meta.append(age);
    box.append(meta);
    // Deny asks for its reason (revealed by the click); the standing grant is secondary
    // and asks for a confirmation, so neither is taken for Approve
    const asking = askingCards.get(card.approval_id) || "";
    const reason = h("input", "nbd-reason");
    reason.type = "text";
    reason.placeholder = "reason the model reads (optional)";
    reason.value = reasons.get(card.approval_id) || "";
    reason.addEventListener("input", () => reasons.set(card.approval_id, reason.value));
    const approve = h("button", "nbd-approve", "Approve");
    const deny = h("button", "nbd-deny", "Deny");
    const denySend = h("button", "nbd-deny nbd-deny-send", "Deny");
    const grant = h("button", "nbd-grant", `Approve all ${card.tool_name} for 30 min…`);
    grant.title = "a standing approval: this call and the run's next calls of the tool, for 30 minutes";
    const grantSend = h("button", "nbd-approve nbd-grant-send", `Approve every ${card.tool_name} call for 30 min`);
    const cancel = h("button", "nbd-secondary nbd-cancel", "Cancel");
    const edit = h("button", "nbd-edit-open", "Edit…");
    edit.title = "change the call's arguments, then approve it";
    const reply = h("button", "nbd-reply-open", "Reply…");
    reply.title = "answer in place of the tool: the model reads your text as the call's result";
    const all = [approve, deny, denySend, grant, grantSend, edit, reply];
    const click = (action, extra = {}) => {
      for (const b of all) b.disabled = true;
      // an edit the kernel refuses (arguments that do not fit) opens again with what was typed
      if (action !== "edit") askingCards.delete(card.approval_id);
      clicked.add(card.approval_id);
      undelivered.delete(card.approval_id);
      const content = { type: action, approval_id: card.approval_id, token: card.token, reason: action === "deny" ? reason.value || null : null, ...extra };
      if (link.send(content)) link.expectAnswer();
    };
    const ask = (what) => { askingCards.set(card.approval_id, what); cards_(); };
    approve.addEventListener("click", () => click("approve"));
    deny.addEventListener("click", () => ask("deny"));
    denySend.addEventListener("click", () => click("deny"));
    reason.addEventListener("keydown", (event) => { if (event.key === "Enter") click("deny"); });
    grant.addEventListener("click", () => ask("grant"));
    grantSend.addEventListener("click", () => click("grant"));
    cancel.addEventListener("click", () => ask(""));
    edit.addEventListener("click", () => ask("edit"));
    reply.addEventListener("click", () => ask("reply"));
    const usable = link.state === "live" && ANSWERABLE.has(card.state) && !clicked.has(card.approval_id);
    for (const b of all) b.disabled = !usable;
    reason.disabled = !usable;
    const actions = h("div", "nbd-card-actions");
    if (asking === "deny" && usable) {
      actions.append(reason, denySend, cancel);
      setTimeout(() => reason.focus(), 0);
    } else if (asking === "grant" && usable) actions.append(grantSend, cancel);
    else if (asking === "edit" && usable && card.allow_edit) {
      if (!editDrafts.has(card.approval_id)) editDrafts.set(card.approval_id, new Map());
      const form = editForm({
        toolName: card.tool_name,
        args: card.args,
        parameters: card.parameters,
        drafts: editDrafts.get(card.approval_id),
        onSend: (args) => click("edit", { arguments: args }),
        onCancel: () => { editDrafts.delete(card.approval_id); ask(""); },
      });
      box.append(form.node);
      setTimeout(() => form.focus(), 0);
    } else if (asking === "reply" && usable) {
      const form = replyBox({
        toolName: card.tool_name,
        draft: replyDrafts.get(card.approval_id),
        onDraft: (text) => replyDrafts.set(card.approval_id, text),
        onSend: (text) => { replyDrafts.delete(card.approval_id); click("reply", { text }); },
        onCancel: () => { replyDrafts.delete(card.approval_id); ask(""); },
      });
      box.append(form.node);
      setTimeout(() => form.focus(), 0);
    } else {
      // the two common answers first, one click each; the rarer ones beside them
      actions.append(approve, deny);
      if (card.allow_edit) actions.append(edit);
      actions.append(reply, grant);
    }
    if (actions.children.length) box.append(actions);
    if (undelivered.has(card.approval_id)) {
      box.append(h("div", "nbd-card-outcome nbd-undelivered", "not sent: no kernel answered, nothing was decided"));
    } else if (card.message) {
      box.append(h("div", "nbd-card-outcome", card.message));
    }
    return box;
  };
  const takeover_ = () => {
    const text = model.get("takeover") || "";
    takeover.textContent = text;
    takeover.style.display = text ? "" : "none";
  };
  const late_ = () => {
    const lines = model.get("late_results") || [];
    late.replaceChildren(...lines.map((line) => h("div", "nbd-late-line", line)));
    late.style.display = lines.length ? "" : "none";
  };
  const attention_ = () => {
    const offer = model.get("attention") || {};
    const state = offer.state || "";
    attention.replaceChildren();
    attention.style.display = state ? "" : "none";
    attention.className = `nbd-attention nbd-attention-${state.replace(/ /g, "-")}`;
    if (!state) return;
    const open = state === "open" && offer.retry && offer.settle;
    if (open || state === "sending") {
      attention.append(h("div", "nbd-card-title", "An interrupted tool call waits for you"));
      const retry = h("button", "nbd-retry", "Retry");
      retry.title = "run the interrupted call again";
      const settle = h("button", "nbd-settle", "Settle…");
      settle.title = "record the call as denied (with a reason the model reads) and go on";
      const actions = h("div", "nbd-card-actions");
      const usable = open && link.state === "live";
      const send = (content) => {
        if (link.send(content)) link.expectAnswer();
        settling = null;
      };
      if (settling === null) {
        retry.disabled = !usable;
        settle.disabled = !usable;
        retry.addEventListener("click", () => { retry.disabled = true; send({ type: "retry", token: offer.retry }); });
        settle.addEventListener("click", () => { settling = ""; attention_(); });
        actions.append(retry, settle);
      } else {
        const reason = h("input", "nbd-reason nbd-settle-reason");
        reason.type = "text";
        reason.placeholder = "reason the model reads (optional)";
        reason.value = settling;
        reason.addEventListener("input", () => { settling = reason.value; });
        const confirm = h("button", "nbd-deny nbd-settle-send", "Settle as denied");
        const cancel = h("button", "nbd-secondary nbd-settle-cancel", "Cancel");
        confirm.disabled = !usable;
        confirm.addEventListener("click", () => send({ type: "settle", token: offer.settle, reason: reason.value || null }));
        reason.addEventListener("keydown", (event) => { if (event.key === "Enter") confirm.click(); });
        cancel.addEventListener("click", () => { settling = null; attention_(); });
        actions.append(reason, confirm, cancel);
        setTimeout(() => reason.focus(), 0);
      }
      attention.append(actions);
    }
    if (offer.message) attention.append(h("div", "nbd-card-outcome", offer.message));
  };
  const cards_ = () => {
    const all = model.get("approvals") || [];
    for (const card of all) if (card.state !== "pending") clicked.delete(card.approval_id);
    cards.replaceChildren(...all.map((c) => (OPEN_CARD.has(c.state) ? openCard(c) : answeredCard(c))));
    tick();
  };
  const awaiting = () => new Set(
    (model.get("approvals") || []).filter((c) => ANSWERABLE.has(c.state) || c.state === "sending")
      .map((c) => c.tool_call_id),
  );
  const keepOpen = (from, to) => {
    // keep open tool-call details open across re-renders
    const open = new Set();
    from.querySelectorAll("details[open]").forEach((d, i) => open.add(i));
    to.querySelectorAll("details").forEach((d, i) => { if (open.has(i)) d.open = true; });
  };
  const steps_ = () => {
    const before = h("div");
    before.append(...steps.children);
    const waiting = awaiting();
    const ordered = [...known.values()].sort((a, b) => a.index - b.index);
    const denied = deniedCalls();
    steps.replaceChildren(...ordered.map((step) => renderStep(step, waiting, denied)));
    keepOpen(before, steps);
    steps_changed();
  };
  const deniedCalls = () => new Set(
    (model.get("approvals") || []).filter((c) => c.state === "denied").map((c) => c.tool_call_id),
  );
  const steps_changed = () => {
    answer_();
    streaming_();
  };
  const answer_ = () => {
    // the final answer, set apart from the steps' intermediate text
    for (const node of steps.querySelectorAll(".nbd-final")) node.classList.remove("nbd-final");
    if (model.get("status") !== "completed") return;
    const ordered = [...known.values()].sort((a, b) => a.index - b.index);
    const last = ordered[ordered.length - 1];
    if (!last || !last.text || (last.tool_calls || []).length) return;
    const block = stepBlock(last.index);
    if (block) block.classList.add("nbd-final");
  };
  const streaming_ = () => {
    // a live count while tokens stream (about 4 characters a token): usage comes per step
    const text = [...known.values()].filter((step) => step.streaming).map((step) => step.text || "").join("");
    tokens.textContent = text ? `streaming · ~${Math.max(1, Math.round(text.length / 4)).toLocaleString()} tokens` : "";
  };
  const stepBlock = (index) => steps.querySelector(`:scope > .nbd-step[data-index="${index}"]`);
  const step_ = (step) => {
    const block = renderStep(step, awaiting(), deniedCalls());
    const old = stepBlock(step.index);
    if (old) {
      keepOpen(old, block);
      old.replaceWith(block);
    } else {
      const after = [...steps.children].find((b) => Number(b.dataset.index) > step.index);
      steps.insertBefore(block, after || null);
    }
    steps_changed();
  };
  const snapshotTrait = () => {
    // the model's snapshot changed (a delta applied, a snapshot loaded, a kernel sync):
    // redraw the steps whose object changed, or all of them when most did
    const snapshot = model.get("snapshot");
    const next = new Map(((snapshot && snapshot.steps) || []).map((step) => [step.index, step]));
    const removed = [...known.keys()].filter((index) => !next.has(index));
    const changed = [...next.values()].filter((step) => known.get(step.index) !== step);
    const before = known;
    known = next;
    if (!before.size || changed.length + removed.length > Math.max(8, next.size / 2)) return steps_();
    for (const index of removed) {
      const block = stepBlock(index);
      if (block) block.remove();
    }
    for (const step of changed) step_(step);
    if (removed.length && !changed.length) steps_changed();
  };

  header_(); summary_(); live_(); cards_(); snapshotTrait(); takeover_(); late_(); attention_();
  const status_ = () => { header_(); summary_(); answer_(); };
  const approvals_ = () => { cards_(); steps_(); summary_(); };
  const traits = [
    ["change:status", status_], ["change:stalled", status_], ["change:step", header_], ["change:progress", header_],
    ["change:started_at", header_], ["change:ended_at", header_], ["change:usage", header_],
    ["change:summary", summary_], ["change:lease_until", summary_], ["change:approvals", approvals_],
    ["change:snapshot", snapshotTrait], ["change:takeover", takeover_],
    ["change:late_results", late_], ["change:attention", attention_],
  ];
  for (const [name, handler] of traits) model.on(name, handler);
  model.on("change", link.alive); // the kernel is sending updates: it is there
  model.on("msg:custom", onMessage);
  link.probe();

  const clock = setInterval(() => {
    if (link.state === "disconnected") return; // nothing it shows changes any more
    if (!FINISHED.has(model.get("status")) || cards.querySelector(".nbd-age")) tick();
  }, 1000);
  return () => {
    clearInterval(clock);
    link.dispose();
    for (const [name, handler] of traits) model.off(name, handler);
    model.off("change", link.alive);
    model.off("msg:custom", onMessage);
  };
}

export default { initialize: ({ model }) => composeSteps(model), render };
