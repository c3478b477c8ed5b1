// nbdurable verdict forms: Edit (a call's arguments, from its tool's JSON schema) and Reply
// (text that stands in for the tool's result), shared by the run view's approval cards and
// the dashboard's inbox. The kernel puts this file before each view's module, after
// kernel_link.js. Neither form holds a token: the view sends what was typed, and the
// kernel checks it (the arguments against the tool's schema once more) before anything
// is recorded.
//
// editForm builds one input per argument: a string as a text field (a textarea when it
// holds a line break), a number or an integer as a number field, a boolean as a checkbox,
// an enum as a choice; anything else (objects, arrays, unions) as JSON in a textarea. A
// value that does not parse (bad JSON, a missing required number, a fraction where an
// integer goes) is said under its field and nothing is sent.

function nbdSchemaNode(schema, root) {
  // a local $ref (pydantic puts enums and nested models under $defs), and Optional[X]
  // (anyOf X | null) read as X that may be left empty
  let node = schema && typeof schema === "object" ? schema : {};
  for (let depth = 0; depth < 8 && typeof node.$ref === "string" && node.$ref.startsWith("#/"); depth += 1) {
    let target = root;
    for (const key of node.$ref.slice(2).split("/")) target = target && typeof target === "object" ? target[key] : undefined;
    node = target && typeof target === "object" ? { ...target, ...node, $ref: undefined } : {};
  }
  const options = node.anyOf || node.oneOf;
  if (Array.isArray(options)) {
    const real = options.filter((o) => !(o && o.type === "null"));
    if (real.length === 1 && real.length < options.length) {
      return { ...nbdSchemaNode(real[0], root), nullable: true, description: node.description || real[0].description };
    }
  }
  return node;
}

function nbdFieldKind(node) {
  if (Array.isArray(node.enum) && node.enum.length) return "enum";
  const type = Array.isArray(node.type) ? node.type.filter((t) => t !== "null") : [node.type];
  if (type.length !== 1) return "json";
  if (["string", "number", "integer", "boolean"].includes(type[0])) return type[0];
  return "json";
}

function nbdEl(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// One field: {row, read(): {ok, present, value, error}, draft(): string}.
// `draft` is what was typed (kept across re-renders), or undefined for the model's value.
function nbdField(name, node, value, present, required, draft) {
  const kind = nbdFieldKind(node);
  const row = nbdEl("label", `nbd-field nbd-field-${kind}`);
  row.dataset.field = name;
  const label = nbdEl("span", "nbd-field-name", name);
  if (required) label.append(nbdEl("span", "nbd-field-required", " *"));
  if (node.description) label.title = node.description;
  row.append(label);
  let input;
  let typed = draft;
  if (kind === "boolean") {
    input = nbdEl("input", "nbd-field-input");
    input.type = "checkbox";
    input.checked = typed !== undefined ? typed === "true" : value === true;
    input.addEventListener("change", () => { typed = String(input.checked); });
  } else if (kind === "enum") {
    input = nbdEl("select", "nbd-field-input");
    if (!required) input.append(nbdEl("option", "", "(none)"));
    node.enum.forEach((choice) => {
      const option = nbdEl("option", "", typeof choice === "string" ? choice : JSON.stringify(choice));
      option.value = JSON.stringify(choice);
      input.append(option);
    });
    input.value = typed !== undefined ? typed : present ? JSON.stringify(value) : required ? JSON.stringify(node.enum[0]) : "(none)";
    input.addEventListener("change", () => { typed = input.value; });
  } else {
    const long = kind === "json" || (kind === "string" && typeof value === "string" && value.includes("\n"));
    input = nbdEl(long ? "textarea" : "input", "nbd-field-input");
    if (!long) input.type = kind === "string" ? "text" : "number";
    if (kind === "integer") input.step = "1";
    if (kind === "number") input.step = "any";
    if (long) input.rows = kind === "json" ? Math.min(8, Math.max(2, JSON.stringify(value ?? null, null, 2).split("\n").length)) : 3;
    let shown = "";
    if (present) shown = kind === "json" ? JSON.stringify(value, null, 2) : kind === "string" ? String(value ?? "") : String(value);
    input.value = typed !== undefined ? typed : shown;
    input.placeholder = kind === "json" ? "JSON" : node.nullable || !required ? "(leave empty to omit)" : "";
    input.addEventListener("input", () => { typed = input.value; });
  }
  input.name = name;
  row.append(input);
  const error = nbdEl("span", "nbd-field-error");
  error.hidden = true;
  row.append(error);
  const clear = () => { error.hidden = true; row.classList.remove("nbd-field-invalid"); };
  input.addEventListener("input", clear); // a field being fixed no longer says it is wrong
  input.addEventListener("change", clear);
  const read = () => {
    const raw = kind === "boolean" ? input.checked : input.value;
    const fail = (text) => ({ ok: false, error: text });
    if (kind === "boolean") return { ok: true, present: true, value: raw };
    if (kind === "enum") {
      if (raw === "(none)" || raw === "") return required ? fail("choose one") : { ok: true, present: false };
      return { ok: true, present: true, value: JSON.parse(raw) };
    }
    if (raw.trim() === "" && kind !== "string") {
      if (node.nullable && present && value === null) return { ok: true, present: true, value: null };
      return required ? fail("required") : { ok: true, present: false };
    }
    if (kind === "string") {
      if (raw === "" && !required && !present) return { ok: true, present: false };
      return { ok: true, present: true, value: raw };
    }
    if (kind === "number" || kind === "integer") {
      const number = Number(raw);
      if (!Number.isFinite(number)) return fail(`not a number: ${raw}`);
      if (kind === "integer" && !Number.isInteger(number)) return fail(`not an integer: ${raw}`);
      return { ok: true, present: true, value: number };
    }
    try {
      return { ok: true, present: true, value: JSON.parse(raw) };
    } catch (err) {
      return fail(`not valid JSON: ${err.message}`);
    }
  };
  return {
    row,
    input,
    draft: () => typed,
    read: () => {
      const got = read();
      error.textContent = got.ok ? "" : got.error;
      error.hidden = got.ok;
      row.classList.toggle("nbd-field-invalid", !got.ok);
      return got;
    },
  };
}

// The Edit form: {node, focus()}. `drafts` (a Map, name -> typed text) keeps what was
// typed when the view renders the card again; onSend(arguments) gets the edited object.
function editForm({ toolName, args, parameters, drafts, onSend, onCancel, disabled }) {
  const form = nbdEl("div", "nbd-edit");
  const root = parameters && typeof parameters === "object" ? parameters : {};
  const properties = root.properties && typeof root.properties === "object" ? root.properties : null;
  const required = new Set(Array.isArray(root.required) ? root.required : []);
  const current = args && typeof args === "object" ? args : {};
  const fields = [];
  if (properties) {
    const names = [...Object.keys(properties), ...Object.keys(current).filter((k) => !(k in properties))];
    for (const name of names) {
      const node = name in properties ? nbdSchemaNode(properties[name], root) : {};
      fields.push([name, nbdField(name, node, current[name], name in current, required.has(name), drafts.get(name))]);
    }
  } else {
    // no schema to build from: the whole arguments object as JSON
    const whole = nbdField("arguments", {}, current, true, true, drafts.get("\u0000all"));
    fields.push(["\u0000all", whole]);
  }
  form.append(nbdEl("div", "nbd-edit-title", `Edit the arguments of ${toolName}, then approve`));
  const grid = nbdEl("div", "nbd-edit-fields");
  for (const [, field] of fields) grid.append(field.row);
  form.append(grid);
  const problem = nbdEl("div", "nbd-field-error nbd-edit-problem");
  problem.hidden = true;
  const send = nbdEl("button", "nbd-approve nbd-edit-send", "Approve with these arguments");
  const cancel = nbdEl("button", "nbd-secondary nbd-edit-cancel", "Cancel");
  const keep = () => { for (const [name, field] of fields) if (field.draft() !== undefined) drafts.set(name, field.draft()); };
  for (const [, field] of fields) {
    field.input.addEventListener("input", keep);
    field.input.addEventListener("change", keep);
  }
  send.disabled = Boolean(disabled);
  for (const [, field] of fields) field.input.disabled = Boolean(disabled);
  send.addEventListener("click", () => {
    let edited = {};
    let ok = true;
    for (const [name, field] of fields) {
      const got = field.read();
      if (!got.ok) { ok = false; continue; }
      if (name === "\u0000all") {
        if (!got.value || typeof got.value !== "object" || Array.isArray(got.value)) {
          ok = false;
          problem.textContent = "the arguments are a JSON object: {\"name\": value, ...}";
          problem.hidden = false;
          continue;
        }
        edited = got.value;
      } else if (got.present) edited[name] = got.value;
    }
    if (!ok) return; // said under the fields: nothing is sent
    problem.hidden = true;
    onSend(edited);
  });
  cancel.addEventListener("click", () => onCancel());
  form.addEventListener("keydown", (event) => { if (event.key === "Escape") onCancel(); });
  const actions = nbdEl("div", "nbd-card-actions");
  actions.append(send, cancel);
  form.append(problem, actions);
  return { node: form, focus: () => { if (fields.length) fields[0][1].input.focus(); } };
}

// The Reply box: {node, focus()}. What is typed is the call's result the model reads
// (not an error); the tool does not run. onDraft keeps the text across re-renders.
function replyBox({ toolName, draft, onDraft, onSend, onCancel, disabled }) {
  const box = nbdEl("div", "nbd-reply");
  box.append(nbdEl("div", "nbd-edit-title", `Answer in place of ${toolName}: the model reads it as the call's result`));
  const text = nbdEl("textarea", "nbd-reply-text");
  text.rows = 2;
  text.placeholder = "e.g. use the staging table instead";
  text.value = draft || "";
  const send = nbdEl("button", "nbd-approve nbd-reply-send", "Send reply");
  const cancel = nbdEl("button", "nbd-secondary nbd-reply-cancel", "Cancel");
  const usable = () => { send.disabled = Boolean(disabled) || !text.value.trim(); };
  text.disabled = Boolean(disabled);
  usable();
  text.addEventListener("input", () => { onDraft(text.value); usable(); });
  text.addEventListener("keydown", (event) => {
    // Enter sends, Shift+Enter is a new line; Escape closes
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); if (!send.disabled) send.click(); }
    if (event.key === "Escape") onCancel();
  });
  send.addEventListener("click", () => { if (text.value.trim()) onSend(text.value); });
  cancel.addEventListener("click", () => onCancel());
  const actions = nbdEl("div", "nbd-card-actions");
  actions.append(send, cancel);
  box.append(text, actions);
  return { node: box, focus: () => text.focus() };
}
