// nbdurable runs dashboard (anywidget ESM): pending approvals, then a paged table of runs.
// Every trait is written by the kernel (columns, rows, total, page, pages, page_size,
// sort_by, descending, status, search, counts, statuses, filters, approvals, selected,
// detail, message, updated_at, paused). The view sends custom messages (query, approve,
// deny, edit, reply, retry, settle, open, close, dismiss, refresh, visibility, ping:
// docs/notebook.md, "Widget messages"). An inbox row answers like a run view's card:
// Approve and Deny one click away, Edit… (when the tool allows it: the form of
// verdict_forms.js) and Reply… beside them.
// No approval token ever comes here: the kernel looks the token up when a verdict arrives.
//
// A view whose kernel is gone (restarted, or a notebook reopened from its saved widget
// state) says "disconnected" and disables its buttons: it never looks live.

const PING_MS = 15000; // a live view says it is there (the kernel pauses reads without views)
const OPEN = new Set(["pending", "invalid token", "expired", "error"]); // rows that take a verdict
const GROUP_MIN = 3; // this many identical waiting calls share one line (two stay apart)
const FILTER_LABELS = { unfinished: "unfinished", attention: "needs a look" };

function h(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  if (m < 60) return `${m}m`;
  const hours = Math.floor(m / 60);
  if (hours < 24) return `${hours}h ${String(m % 60).padStart(2, "0")}m`;
  const days = Math.floor(hours / 24);
  return days < 10 ? `${days}d ${hours % 24}h` : `${days}d`;
}

function clockTime(ms) {
  // "12:03" (24-hour, like the run view) today, "2024-05-02 12:03" another day
  const at = new Date(ms);
  const pad = (n) => String(n).padStart(2, "0");
  const time = `${pad(at.getHours())}:${pad(at.getMinutes())}`;
  if (at.toDateString() === new Date().toDateString()) return time;
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ${time}`;
}

function number(n) {
  try {
    return Number(n).toLocaleString();
  } catch (_err) {
    return String(n);
  }
}

function render({ model, el }) {
  const root = h("div", "nbd-dash");
  root.dataset.kernel = "checking";

  const header = h("div", "nbd-dash-header");
  const title = h("span", "nbd-dash-title", "Runs");
  const summary = h("span", "nbd-dash-summary");
  const live = h("span", "nbd-dash-live");
  const refresh = h("button", "nbd-dash-btn nbd-dash-refresh", "Refresh");
  refresh.title = "read the store again now";
  header.append(title, summary, live, refresh);

  const approvals = h("div", "nbd-dash-approvals");
  const approvalsHead = h("div", "nbd-dash-section");
  const approvalList = h("div", "nbd-dash-approval-list");
  approvals.append(approvalsHead, approvalList);

  const controls = h("div", "nbd-dash-controls");
  const statusSelect = h("select", "nbd-dash-status");
  statusSelect.title = "show runs in this status";
  const search = h("input", "nbd-dash-search");
  search.type = "search";
  search.placeholder = "search run, agent, status, reason";
  controls.append(statusSelect, search);

  const table = h("table", "nbd-dash-table");
  const thead = h("thead");
  const headRow = h("tr");
  thead.append(headRow);
  const tbody = h("tbody");
  table.append(thead, tbody);
  const empty = h("div", "nbd-dash-empty");

  const pager = h("div", "nbd-dash-pager");
  const prev = h("button", "nbd-dash-btn nbd-dash-prev", "‹ prev");
  const pageInfo = h("span", "nbd-dash-page-info");
  const next = h("button", "nbd-dash-btn nbd-dash-next", "next ›");
  const sizeSelect = h("select", "nbd-dash-size");
  sizeSelect.title = "runs per page";
  pager.append(prev, pageInfo, next, sizeSelect);

  const footer = h("div", "nbd-dash-footer");
  const detailInfo = h("span", "nbd-dash-detail");
  const closeDetail = h("button", "nbd-dash-btn nbd-dash-close", "close");
  footer.append(detailInfo, closeDetail);
  const message = h("div", "nbd-dash-message");

  root.append(header, approvals, controls, table, empty, pager, footer, message);
  el.append(root);

  const denying = new Map(); // approval id -> the reason being typed (Deny asked for it)
  // approval id -> {what: "edit" | "reply", drafts: Map(argument -> typed), text}
  const composing = new Map();
  const settling = new Map(); // run id -> the reason being typed (Settle asked for it)
  const clicked = new Set(); // rows clicked here whose answer has not come back yet
  const undelivered = new Set(); // rows clicked here whose click reached no kernel

  // -- is the kernel there? (kernelLink, from kernel_link.js) -----------------------------
  const link = kernelLink(model, {
    onState: (state) => setConn(state),
    onLive: () => live_(),
    onAck: (id) => undelivered.delete(id),
  });
  const ask = (content) => {
    if (link.state !== "live") return false;
    if (!link.send(content)) return false;
    link.expectAnswer();
    return true;
  };
  function setConn(next) {
    if (next === "disconnected") {
      for (const id of clicked) undelivered.add(id);
      clicked.clear();
    }
    root.dataset.kernel = next;
    root.classList.toggle("nbd-dash-disconnected", next === "disconnected");
    live_();
    approvals_();
    controls_();
    rows_();
  }

  // -- rendering ---------------------------------------------------------------------------
  const ago = (at) => (at ? `${duration(Date.now() - at)} ago` : "");

  function live_() {
    let text;
    if (link.state === "disconnected") text = "disconnected: re-run the cell or %durable dashboard";
    else if (link.state === "checking") text = "connecting to the kernel…";
    else if (link.busy) text = "the kernel is busy: actions wait their turn";
    else if (model.get("paused")) text = "paused (no view for a while): click Refresh";
    else text = model.get("updated_at") ? `live · read ${ago(model.get("updated_at"))}` : "live";
    live.textContent = text;
    live.className = link.state === "disconnected" ? "nbd-dash-live nbd-dash-gone" : "nbd-dash-live";
    refresh.disabled = link.state !== "live";
  }

  function summary_() {
    const counts = model.get("counts") || {};
    const total = Object.values(counts).reduce((n, c) => n + c, 0);
    const parts = [`${number(total)} run${total === 1 ? "" : "s"}`];
    for (const status of ["waiting_approval", "needs_attention", "stalled", "running", "pending", "failed"]) {
      if (counts[status]) parts.push(`${number(counts[status])} ${status.replace("_", " ")}`);
    }
    summary.textContent = parts.join(" · ");
  }

  function approvalRow(item) {
    const row = h("div", "nbd-dash-approval");
    row.dataset.approvalId = item.approval_id;
    const call = h("code", "nbd-dash-call");
    const where = h("span", "nbd-dash-where");
    const runLink = h("a", "nbd-dash-run-link");
    runLink.href = "#";
    runLink.addEventListener("click", (event) => {
      event.preventDefault();
      ask({ type: "open", run_id: row.dataset.runId, view: "run" });
    });
    const agent = h("span", "nbd-dash-agent");
    const asked = h("span", "nbd-dash-asked");
    where.append(runLink, agent, asked);
    const actions = h("span", "nbd-dash-actions");
    const approve = h("button", "nbd-dash-btn nbd-dash-approve", "Approve");
    const deny = h("button", "nbd-dash-btn nbd-dash-deny", "Deny");
    const reason = h("input", "nbd-dash-reason");
    reason.type = "text";
    reason.placeholder = "reason (optional)";
    const sendDeny = h("button", "nbd-dash-btn nbd-dash-deny-send", "Deny");
    const cancel = h("button", "nbd-dash-btn nbd-dash-cancel", "Cancel");
    const edit = h("button", "nbd-dash-btn nbd-edit-open", "Edit…");
    edit.title = "change the call's arguments, then approve it";
    const reply = h("button", "nbd-dash-btn nbd-reply-open", "Reply…");
    reply.title = "answer in place of the tool: the model reads your text as the call's result";
    const outcome = h("span", "nbd-dash-outcome");
    const dismiss = h("button", "nbd-dash-btn nbd-dash-dismiss", "×");
    dismiss.title = "remove this line";
    actions.append(approve, deny, edit, reply, reason, sendDeny, cancel);
    const panel = h("div", "nbd-dash-panel"); // Edit's form or Reply's box, under the line
    row.append(call, where, actions, outcome, dismiss, panel);
    let shown = ""; // what the panel holds ("" | "edit" | "reply" | "edit-off" | ...)
    let current = null; // the row's data

    const verdict = (action, extra = {}) => {
      const id = row.dataset.approvalId;
      const content = {
        type: action,
        run_id: row.dataset.runId,
        approval_id: id,
        reason: action === "deny" ? reason.value || null : null,
        ...extra,
      };
      if (!ask(content)) return;
      clicked.add(id);
      undelivered.delete(id);
      denying.delete(id);
      // an edit the kernel refuses opens again with what was typed; a sent reply is done
      if (action !== "edit") composing.delete(id);
      approvals_();
    };
    const compose = (what) => {
      const id = row.dataset.approvalId;
      if (what) composing.set(id, { what, drafts: new Map(), text: "" });
      else composing.delete(id);
      denying.delete(id);
      approvals_();
    };
    edit.addEventListener("click", () => compose("edit"));
    reply.addEventListener("click", () => compose("reply"));
    const panel_ = (mode, off) => {
      const key = `${mode}${off ? "-off" : ""}`;
      if (key === shown) return;
      shown = key;
      panel.replaceChildren();
      row.classList.toggle("nbd-dash-composing", Boolean(mode));
      if (!mode) return;
      const state = composing.get(row.dataset.approvalId);
      const form = mode === "edit"
        ? editForm({
          toolName: current.tool,
          args: current.args,
          parameters: current.parameters,
          drafts: state.drafts,
          disabled: off,
          onSend: (args) => verdict("edit", { arguments: args }),
          onCancel: () => compose(""),
        })
        : replyBox({
          toolName: current.tool,
          draft: state.text,
          disabled: off,
          onDraft: (text) => { state.text = text; },
          onSend: (text) => verdict("reply", { text }),
          onCancel: () => compose(""),
        });
      panel.append(form.node);
      if (!off) setTimeout(() => form.focus(), 0);
    };
    approve.addEventListener("click", () => verdict("approve"));
    deny.addEventListener("click", () => {
      composing.delete(row.dataset.approvalId);
      denying.set(row.dataset.approvalId, "");
      approvals_();
      reason.focus();
    });
    reason.addEventListener("input", () => denying.set(row.dataset.approvalId, reason.value));
    reason.addEventListener("keydown", (event) => {
      if (event.key === "Enter") verdict("deny");
      if (event.key === "Escape") cancel.click();
    });
    sendDeny.addEventListener("click", () => verdict("deny"));
    cancel.addEventListener("click", () => {
      denying.delete(row.dataset.approvalId);
      approvals_();
    });
    dismiss.addEventListener("click", () => ask({ type: "dismiss", approval_id: row.dataset.approvalId }));

    row.update = (data) => {
      current = data;
      const id = data.approval_id;
      row.dataset.runId = data.run_id;
      row.dataset.state = data.state;
      row.className = `nbd-dash-approval nbd-dash-a-${data.state.replace(/ /g, "-")}`;
      call.textContent = data.call;
      call.title = data.call_full;
      runLink.textContent = data.run_id;
      agent.textContent = data.agent;
      asked.dataset.at = String(data.requested_at || 0);
      asked.textContent = data.requested_at
        ? link.state === "disconnected" ? `asked at ${clockTime(data.requested_at)}` : `asked ${ago(data.requested_at)}`
        : "";
      if (data.token_expired && OPEN.has(data.state)) asked.textContent += " · token expired: Approve signs a fresh one";
      if (!OPEN.has(data.state)) clicked.delete(id);
      if (!OPEN.has(data.state) && data.state !== "sending") composing.delete(id); // answered
      const open = OPEN.has(data.state) && !clicked.has(id);
      const asking = open && denying.has(id);
      const writing = open || (clicked.has(id) && OPEN.has(data.state)) ? composing.get(id) : undefined;
      const mode = writing && (writing.what !== "edit" || data.allow_edit) ? writing.what : "";
      const off = link.state !== "live" || data.state === "sending";
      approve.hidden = !open || asking || Boolean(mode);
      deny.hidden = !open || asking || Boolean(mode);
      edit.hidden = !open || asking || Boolean(mode) || !data.allow_edit;
      reply.hidden = !open || asking || Boolean(mode);
      reason.hidden = !asking;
      sendDeny.hidden = !asking;
      cancel.hidden = !asking;
      for (const b of [approve, deny, sendDeny, cancel, edit, reply]) b.disabled = off;
      panel_(mode, off || clicked.has(id));
      reason.disabled = off;
      if (asking && document.activeElement !== reason) reason.value = denying.get(id) || "";
      let said = data.message || "";
      if (!OPEN.has(data.state) && data.state !== "sending" && data.answered_at) {
        said += ` · ${clockTime(data.answered_at)}`; // when, so an old outcome does not read as news
      }
      if (data.state === "sending" || clicked.has(id)) said = data.message || "checking…";
      if (undelivered.has(id)) said = "not sent: the kernel is gone; nothing was recorded";
      outcome.textContent = said;
      outcome.title = said;
      dismiss.hidden = OPEN.has(data.state) || data.state === "sending" || link.state !== "live";
    };
    return row;
  }

  function approvals_() {
    const items = model.get("approvals") || [];
    const waiting = items.filter((a) => OPEN.has(a.state) || a.state === "sending").length;
    approvals.hidden = items.length === 0;
    approvalsHead.textContent = waiting
      ? `Waiting for approval (${waiting})`
      : "Approvals answered here";
    // update rows in place (keyed by approval id) so a reason being typed keeps its focus
    const existing = new Map();
    for (const node of approvalList.children) existing.set(node.dataset.approvalId, node);
    let at = 0;
    const place = (key, make, data) => {
      let node = existing.get(key);
      existing.delete(key);
      if (!node) node = make(data);
      node.update(data);
      if (approvalList.children[at] !== node) approvalList.insertBefore(node, approvalList.children[at] || null);
      at += 1;
    };
    for (const group of grouped(items)) {
      if (group.items.length < GROUP_MIN || expanded.has(group.key)) {
        for (const item of group.items) place(item.approval_id, approvalRow, item);
      } else {
        place(`group:${group.key}`, groupRow, group);
      }
    }
    for (const node of existing.values()) node.remove();
  }

  // identical calls (same tool and arguments, same state) waiting in several runs: one
  // line with a count and a bulk action, confirmed; each verdict is still checked alone
  const expanded = new Set(); // group keys shown one line per call
  function grouped(items) {
    const groups = new Map();
    for (const item of items) {
      const busy = clicked.has(item.approval_id) || denying.has(item.approval_id)
        || composing.has(item.approval_id) || item.state === "sending";
      const key = busy ? `one:${item.approval_id}` : `${item.state}\u0000${item.call_full}`;
      if (!groups.has(key)) groups.set(key, { key, items: [] });
      groups.get(key).items.push(item);
    }
    return [...groups.values()];
  }

  function groupRow(first) {
    const row = h("div", "nbd-dash-approval nbd-dash-group");
    row.dataset.approvalId = `group:${first.key}`;
    const call = h("code", "nbd-dash-call");
    const count = h("span", "nbd-dash-count");
    const where = h("span", "nbd-dash-where");
    const actions = h("span", "nbd-dash-actions");
    const outcome = h("span", "nbd-dash-outcome");
    const show = h("button", "nbd-dash-btn nbd-dash-expand", "show each");
    row.append(call, count, where, actions, outcome, show);
    let confirming = "";
    let group = first;
    show.addEventListener("click", () => { expanded.add(group.key); approvals_(); });
    const bulk = (action) => {
      for (const item of group.items) {
        if (!ask({ type: action, run_id: item.run_id, approval_id: item.approval_id, reason: null })) return;
        clicked.add(item.approval_id);
        undelivered.delete(item.approval_id);
      }
      confirming = "";
      approvals_();
    };
    row.update = (data) => {
      group = data;
      const lead = data.items[0];
      const n = data.items.length;
      row.className = `nbd-dash-approval nbd-dash-group nbd-dash-a-${lead.state.replace(/ /g, "-")}`;
      call.textContent = lead.call;
      call.title = lead.call_full;
      count.textContent = `× ${n}`;
      const runs = new Set(data.items.map((item) => item.run_id)).size;
      where.textContent = `${runs} run${runs === 1 ? "" : "s"} · ${lead.agent}`;
      const open = OPEN.has(lead.state);
      const off = link.state !== "live";
      const buttons = [];
      if (open && !confirming) {
        const approve = h("button", "nbd-dash-btn nbd-dash-approve nbd-dash-approve-all", `Approve all ${n}…`);
        const deny = h("button", "nbd-dash-btn nbd-dash-deny nbd-dash-deny-all", `Deny all ${n}…`);
        approve.addEventListener("click", () => { confirming = "approve"; row.update(group); });
        deny.addEventListener("click", () => { confirming = "deny"; row.update(group); });
        buttons.push(approve, deny);
      } else if (open) {
        const verb = confirming === "approve" ? "Approve" : "Deny";
        const yes = h("button", `nbd-dash-btn nbd-dash-${confirming} nbd-dash-confirm`, `${verb} these ${n} calls`);
        const no = h("button", "nbd-dash-btn nbd-dash-cancel", "Cancel");
        yes.addEventListener("click", () => bulk(confirming));
        no.addEventListener("click", () => { confirming = ""; row.update(group); });
        buttons.push(yes, no);
      }
      for (const b of buttons) b.disabled = off;
      actions.replaceChildren(...buttons);
      outcome.textContent = open ? "" : `${lead.message || lead.state} (× ${n})`;
    };
    return row;
  }

  function controls_() {
    const counts = model.get("counts") || {};
    const total = Object.values(counts).reduce((n, c) => n + c, 0);
    const current = model.get("status") || "";
    const options = [["", `all runs (${number(total)})`]];
    for (const key of model.get("filters") || []) {
      const members = key === "unfinished"
        ? ["queued", "pending", "running", "retry_wait", "waiting_approval", "needs_attention", "cancelling", "suspended", "stalled"]
        : ["waiting_approval", "needs_attention", "failed", "suspended", "stalled"];
      const n = members.reduce((sum, s) => sum + (counts[s] || 0), 0);
      options.push([key, `${FILTER_LABELS[key] || key} (${number(n)})`]);
    }
    for (const status of model.get("statuses") || []) {
      if (counts[status] || status === current) options.push([status, `${status} (${number(counts[status] || 0)})`]);
    }
    statusSelect.replaceChildren(...options.map(([value, label]) => {
      const option = h("option", "", label);
      option.value = value;
      return option;
    }));
    statusSelect.value = current;
    if (document.activeElement !== search) search.value = model.get("search") || "";
    const size = model.get("page_size");
    sizeSelect.replaceChildren(...[...new Set([...(model.get("page_sizes") || []), size])]
      .sort((a, b) => a - b)
      .map((n) => {
        const option = h("option", "", `${n} per page`);
        option.value = String(n);
        return option;
      }));
    sizeSelect.value = String(size);
    const off = link.state !== "live";
    statusSelect.disabled = off;
    search.disabled = off;
    sizeSelect.disabled = off;
    const page = model.get("page");
    const pages = model.get("pages");
    prev.disabled = off || page <= 0;
    next.disabled = off || page >= pages - 1;
    const shown = (model.get("rows") || []).length;
    const first = model.get("total") ? page * size + 1 : 0;
    pageInfo.textContent = `${number(first)}–${number(first + Math.max(shown - 1, 0))} of ${number(model.get("total"))}` +
      ` · page ${page + 1} of ${pages}`;
    pager.hidden = pages <= 1 && !model.get("total");
    const selected = model.get("selected");
    footer.hidden = !selected;
    detailInfo.textContent = selected ? `below: ${model.get("detail") === "history" ? "history of" : "live view of"} ${selected}` : "";
    closeDetail.disabled = off;
    summary_();
  }

  function headers_() {
    const columns = model.get("columns") || [];
    const sortBy = model.get("sort_by");
    const descending = model.get("descending");
    headRow.replaceChildren(...columns.map((column) => {
      const th = h("th", `nbd-k-${column.kind} nbd-c-${column.key}`);
      th.append(h("span", "", column.label));
      if (column.sortable) {
        th.classList.add("nbd-dash-sortable");
        th.title = `sort by ${column.label}`;
        if (column.key === sortBy) th.append(h("span", "nbd-dash-arrow", descending ? " ▼" : " ▲"));
        th.addEventListener("click", () => ask({
          type: "query",
          sort_by: column.key,
          descending: column.key === sortBy ? !descending : false,
        }));
      }
      return th;
    }), h("th", "nbd-k-actions"));
  }

  function attentionButtons(runId, off) {
    // a needs_attention run: Retry, or Settle (a reason, then "Settle as denied"); the
    // kernel signs the action's token for the run's current stop and records who decided
    const stop = (event) => event.stopPropagation();
    if (!settling.has(runId)) {
      const retry = h("button", "nbd-dash-btn nbd-dash-retry", "Retry");
      retry.title = "run the interrupted call again";
      const settle = h("button", "nbd-dash-btn nbd-dash-settle", "Settle…");
      settle.title = "record the interrupted call as denied and let the run go on";
      retry.disabled = off;
      settle.disabled = off;
      retry.addEventListener("click", (event) => {
        stop(event);
        if (ask({ type: "retry", run_id: runId })) retry.disabled = true;
      });
      settle.addEventListener("click", (event) => { stop(event); settling.set(runId, ""); rows_(); });
      return [retry, settle];
    }
    const reason = h("input", "nbd-dash-reason nbd-dash-settle-reason");
    reason.type = "text";
    reason.placeholder = "reason the model reads (optional)";
    reason.value = settling.get(runId) || "";
    reason.addEventListener("click", stop);
    reason.addEventListener("input", () => settling.set(runId, reason.value));
    const send = h("button", "nbd-dash-btn nbd-dash-deny-send nbd-dash-settle-send", "Settle as denied");
    const cancel = h("button", "nbd-dash-btn nbd-dash-cancel", "Cancel");
    send.disabled = off;
    send.addEventListener("click", (event) => {
      stop(event);
      if (ask({ type: "settle", run_id: runId, reason: reason.value || null })) settling.delete(runId);
      rows_();
    });
    reason.addEventListener("keydown", (event) => { if (event.key === "Enter") send.click(); });
    cancel.addEventListener("click", (event) => { stop(event); settling.delete(runId); rows_(); });
    setTimeout(() => reason.focus(), 0);
    return [reason, send, cancel];
  }

  function rows_() {
    const columns = model.get("columns") || [];
    const rows = model.get("rows") || [];
    const selected = model.get("selected");
    const off = link.state !== "live";
    tbody.replaceChildren(...rows.map((row) => {
      const tr = h("tr", row.id === selected ? "nbd-dash-row nbd-dash-selected" : "nbd-dash-row");
      tr.dataset.runId = row.id;
      tr.title = off ? "" : `show ${row.id} below`;
      for (const column of columns) {
        const td = h("td", `nbd-k-${column.kind} nbd-c-${column.key}`);
        const text = row.cells[column.key] || "";
        if (column.kind === "badge") {
          td.append(h("span", `nbd-dash-badge nbd-s-${text}`, text));
        } else if (column.kind === "age") {
          td.dataset.createdAt = String(row.created_at || 0);
          td.textContent = row.created_at ? duration(Date.now() - row.created_at) : text;
          if (row.created_at) td.title = new Date(row.created_at).toLocaleString();
        } else {
          td.textContent = text;
          const full = (row.titles || {})[column.key];
          if (full || column.kind === "long") td.title = full || text;
        }
        tr.append(td);
      }
      const actions = h("td", "nbd-k-actions");
      const history = h("button", "nbd-dash-btn nbd-dash-history", "history");
      history.title = "its checkpoints, step by step (rewind from one)";
      history.disabled = off;
      history.addEventListener("click", (event) => {
        event.stopPropagation();
        ask({ type: "open", run_id: row.id, view: "history" });
      });
      actions.append(history);
      tr.append(actions);
      tr.addEventListener("click", () => ask({ type: "open", run_id: row.id, view: row.live ? "run" : "history" }));
      if ((row.cells || {}).status !== "needs_attention") return [tr];
      tr.classList.add("nbd-dash-row-attn");
      // a needs_attention run: a line of its own under its row, the way out beside the why
      const sub = h("tr", "nbd-dash-subrow");
      sub.dataset.runId = row.id;
      const cell = h("td", "nbd-dash-attn-cell");
      cell.colSpan = columns.length + 1;
      const why = h("span", "nbd-dash-attn-why", (row.titles || {}).reason || row.cells.reason || "");
      cell.append(...attentionButtons(row.id, off), why);
      sub.append(cell);
      return [tr, sub];
    }).flat());
    table.classList.toggle("nbd-dash-off", off);
    // run ids are never cut: the id column is as wide as this page's longest id
    const longest = Math.max(8, ...rows.map((row) => String(row.id).length));
    const idHead = headRow.querySelector("th.nbd-k-id");
    if (idHead) idHead.style.width = `calc(${Math.min(longest, 48)}ch + 14px)`;
    const total = model.get("total");
    empty.hidden = rows.length > 0;
    empty.textContent = model.get("runs_total")
      ? "no run matches this filter or search"
      : "no runs yet: start one with %%agent or runtime.submit(...)";
    table.hidden = rows.length === 0 && !total;
    controls_();
  }

  function message_() {
    message.textContent = model.get("message") || "";
    message.className = model.get("message_error") ? "nbd-dash-message nbd-dash-error" : "nbd-dash-message";
  }

  const tick = () => {
    // only a text that changed is written: a write forces a layout, and a page of
    // 100 rows rewritten every second makes scrolling stutter
    const put = (node, text) => { if (node.textContent !== text) node.textContent = text; };
    for (const td of tbody.querySelectorAll("td[data-created-at]")) {
      const at = Number(td.dataset.createdAt);
      if (at) put(td, duration(Date.now() - at));
    }
    for (const node of approvalList.querySelectorAll(".nbd-dash-asked")) {
      const at = Number(node.dataset.at);
      if (at && link.state !== "disconnected") put(node, `asked ${ago(at)}`);
    }
    if (link.state === "live") live_();
  };

  // -- wiring ------------------------------------------------------------------------------
  refresh.addEventListener("click", () => ask({ type: "refresh" }));
  statusSelect.addEventListener("change", () => ask({ type: "query", status: statusSelect.value }));
  let typing = null;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => ask({ type: "query", search: search.value }), 250);
  });
  sizeSelect.addEventListener("change", () => ask({ type: "query", page_size: Number(sizeSelect.value) }));
  prev.addEventListener("click", () => ask({ type: "query", page: model.get("page") - 1 }));
  next.addEventListener("click", () => ask({ type: "query", page: model.get("page") + 1 }));
  closeDetail.addEventListener("click", () => ask({ type: "close" }));

  headers_(); rows_(); approvals_(); live_(); message_();
  const traits = [
    ["change:columns", () => { headers_(); rows_(); }],
    ["change:sort_by", headers_], ["change:descending", headers_],
    ["change:rows", rows_], ["change:selected", rows_],
    ["change:total", controls_], ["change:runs_total", rows_], ["change:page", controls_],
    ["change:pages", controls_], ["change:page_size", controls_], ["change:status", controls_],
    ["change:search", controls_], ["change:counts", controls_], ["change:detail", controls_],
    ["change:approvals", approvals_], ["change:message", message_], ["change:message_error", message_],
    ["change:updated_at", live_], ["change:paused", live_],
  ];
  for (const [name, handler] of traits) model.on(name, handler);
  model.on("change", link.alive); // the kernel is sending updates: it is there
  link.probe();

  // nobody sees the view (scrolled away, a hidden tab): the kernel stops reading the
  // store until it is seen again, so an idle kernel with a dashboard stays idle
  let onScreen = true;
  let shown = true;
  const visibility = () => {
    const now = onScreen && !document.hidden;
    if (now === shown) return;
    shown = now;
    if (link.state === "live") link.send({ type: "visibility", visible: now });
  };
  const observer = typeof IntersectionObserver === "function"
    ? new IntersectionObserver((entries) => {
      onScreen = entries.some((entry) => entry.isIntersecting);
      visibility();
    })
    : null;
  if (observer) observer.observe(root);
  document.addEventListener("visibilitychange", visibility);

  const clock = setInterval(() => { if (shown) tick(); }, 1000);
  const pings = setInterval(() => { if (link.state === "live") link.probe(); }, PING_MS);
  return () => {
    if (observer) observer.disconnect();
    document.removeEventListener("visibilitychange", visibility);
    clearInterval(clock);
    clearInterval(pings);
    link.dispose();
    clearTimeout(typing);
    for (const [name, handler] of traits) model.off(name, handler);
    model.off("change", link.alive);
  };
}

export default { render };
