// nbdurable run view (anywidget ESM): the live view of one run.
// Reads the synced traits the kernel sets (status, step, steps, text, usage,
// approvals, error, started_at, ended_at, following) and sends one custom
// message per card click: {action: "approve" | "deny", approval_id, token, reason}.
// The card's token is the request's signed token; the secret never reaches here.

const FINISHED = new Set(["completed", "failed", "cancelled", "error"]);

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

function usageLine(usage) {
  if (!usage || !usage.total_tokens) return "no tokens yet";
  let line = `${usage.input_tokens} in + ${usage.output_tokens} out = ${usage.total_tokens} tokens`;
  if (usage.cost !== null && usage.cost !== undefined) line += ` · $${Number(usage.cost).toFixed(4)}`;
  return line;
}

function renderToolCall(call, awaiting) {
  const box = h("details", "nbd-tool");
  const summary = h("summary", "nbd-tool-summary");
  summary.append(h("code", "", argsLine(call.tool_name, call.args)));
  let mark = call.done ? (call.is_error ? "error" : "done") : "running";
  if (!call.done && awaiting.has(call.tool_call_id)) mark = "awaiting approval";
  summary.append(h("span", `nbd-tool-state nbd-state-${mark.replace(/ /g, "-")}`, mark));
  box.append(summary);
  box.append(h("div", "nbd-label", "arguments"));
  box.append(h("pre", "nbd-pre", JSON.stringify(call.args || {}, null, 2)));
  if (call.done) {
    box.append(h("div", "nbd-label", "result"));
    const result = typeof call.result === "string" ? call.result : JSON.stringify(call.result, null, 2);
    box.append(h("pre", call.is_error ? "nbd-pre nbd-error-text" : "nbd-pre", result));
  }
  return box;
}

function renderSteps(container, steps, awaiting) {
  container.replaceChildren();
  for (const step of steps || []) {
    const block = h("div", "nbd-step");
    const head = h("div", "nbd-step-head", `step ${step.index}`);
    if (step.attempts > 1) head.append(h("span", "nbd-note", ` · attempt ${step.attempts}`));
    block.append(head);
    if (step.text) {
      const text = h("div", step.streaming ? "nbd-text nbd-streaming" : "nbd-text", step.text);
      block.append(text);
    }
    for (const call of step.tool_calls || []) block.append(renderToolCall(call, awaiting));
    container.append(block);
  }
}

function renderCard(model, card, reasons) {
  const box = h("div", `nbd-card nbd-card-${card.state.replace(/ /g, "-")}`);
  box.append(h("div", "nbd-card-title", "Approval needed"));
  box.append(h("code", "nbd-card-call", argsLine(card.tool_name, card.args)));
  const meta = h("div", "nbd-card-meta");
  const path = card.agent_path && card.agent_path.length ? card.agent_path.join(" › ") : "(this agent)";
  meta.append(h("span", "", `agent: ${path}`));
  const open = card.state === "pending" || card.state === "invalid token" ||
    card.state === "stale" || card.state === "error";
  // an answered card keeps the age it had; only a waiting one keeps counting
  const age = h("span", open ? "nbd-age nbd-age-live" : "nbd-age", "");
  age.dataset.requestedAt = String(card.requested_at || 0);
  meta.append(age);
  box.append(meta);
  const reason = h("input", "nbd-reason");
  reason.type = "text";
  reason.placeholder = "reason (optional, for a denial)";
  reason.value = reasons.get(card.approval_id) || "";
  reason.addEventListener("input", () => reasons.set(card.approval_id, reason.value));
  const approve = h("button", "nbd-approve", "Approve");
  const deny = h("button", "nbd-deny", "Deny");
  const send = (action) => {
    approve.disabled = true;
    deny.disabled = true;
    model.send({ action, approval_id: card.approval_id, token: card.token, reason: reason.value || null });
  };
  approve.addEventListener("click", () => send("approve"));
  deny.addEventListener("click", () => send("deny"));
  const done = !open || card.state === "stale";
  approve.disabled = done;
  deny.disabled = done;
  reason.disabled = done;
  const actions = h("div", "nbd-card-actions");
  actions.append(reason, approve, deny);
  box.append(actions);
  if (card.message) box.append(h("div", "nbd-card-outcome", card.message));
  return box;
}

function render({ model, el }) {
  const root = h("div", "nbd-run");
  const header = h("div", "nbd-header");
  const badge = h("span", "nbd-badge");
  const runId = h("span", "nbd-run-id");
  const stepCounter = h("span", "nbd-step-counter");
  const elapsed = h("span", "nbd-elapsed");
  header.append(badge, runId, stepCounter, elapsed);
  const usage = h("div", "nbd-usage");
  const error = h("div", "nbd-error");
  const cards = h("div", "nbd-cards");
  const steps = h("div", "nbd-steps");
  root.append(header, usage, error, cards, steps);
  // one line when another runtime took the run over (the run_taken_over event)
  const takeover = h("div", "nbd-takeover");
  usage.after(takeover);
  el.append(root);
  const reasons = new Map();

  const tick = () => {
    const started = model.get("started_at");
    const ended = model.get("ended_at");
    elapsed.textContent = started ? `elapsed ${duration((ended || Date.now()) - started)}` : "";
    for (const node of cards.querySelectorAll(".nbd-age")) {
      const at = Number(node.dataset.requestedAt);
      const live = node.classList.contains("nbd-age-live");
      if (live || !node.textContent) {
        node.textContent = at ? `asked ${duration(Date.now() - at)} ago` : "";
      }
    }
  };
  const header_ = () => {
    const status = model.get("status");
    badge.textContent = status;
    badge.className = `nbd-badge nbd-status-${status}`;
    runId.textContent = model.get("run_id");
    stepCounter.textContent = `step ${model.get("step")}`;
    tick();
  };
  const usage_ = () => { usage.textContent = usageLine(model.get("usage")); };
  const error_ = () => {
    const text = model.get("error");
    error.textContent = text;
    error.style.display = text ? "" : "none";
  };
  const takeover_ = () => {
    const text = model.get("takeover") || "";
    takeover.textContent = text;
    takeover.style.display = text ? "" : "none";
  };
  const cards_ = () => {
    cards.replaceChildren(...(model.get("approvals") || []).map((c) => renderCard(model, c, reasons)));
    tick();
  };
  const steps_ = () => {
    // keep open tool-call details open across re-renders
    const open = new Set();
    steps.querySelectorAll("details[open]").forEach((d, i) => open.add(i));
    const awaiting = new Set(
      (model.get("approvals") || [])
        .filter((c) => c.state === "pending" || c.state === "invalid token" || c.state === "error")
        .map((c) => c.tool_call_id),
    );
    renderSteps(steps, model.get("steps"), awaiting);
    steps.querySelectorAll("details").forEach((d, i) => { if (open.has(i)) d.open = true; });
  };

  header_(); usage_(); error_(); cards_(); steps_();
  takeover_();
  model.on("change:takeover", takeover_);
  model.on("change:status", header_);
  model.on("change:step", header_);
  model.on("change:started_at", header_);
  model.on("change:ended_at", header_);
  model.on("change:usage", usage_);
  model.on("change:error", error_);
  const approvals_ = () => { cards_(); steps_(); };
  model.on("change:approvals", approvals_);
  model.on("change:steps", steps_);
  const timer = setInterval(() => {
    if (!FINISHED.has(model.get("status")) || cards.querySelector(".nbd-age-live")) tick();
  }, 1000);
  return () => {
    clearInterval(timer);
    model.off("change:status", header_);
    model.off("change:step", header_);
    model.off("change:started_at", header_);
    model.off("change:ended_at", header_);
    model.off("change:usage", usage_);
    model.off("change:error", error_);
    model.off("change:takeover", takeover_);
    model.off("change:approvals", approvals_);
    model.off("change:steps", steps_);
  };
}

export default { render };
