// The form of one node: its name, its type's config fields (drawn from GET /api/meta's node_types, so a node
// type added on the server needs nothing here), retry and onError, its connections, and what it did in the
// last run. Used for a new node (type picker, "Add node") and an existing one ("Apply", "Delete node").
import { field, h, hint, put } from "../../ui.js";
import { showValue } from "./document.js";

// A node type's description (GET /api/meta's node_types: {name, label, help, fields}), or null for a type the
// server no longer lists (a node of it is shown with its name and no fields).
function typeOf(nodeTypes, type) {
  return nodeTypes.find((item) => item.name === type) || null;
}

// A new node's config: each field's default (a field without one starts empty).
export function defaultConfig(nodeTypes, type) {
  const config = {};
  for (const spec of typeOf(nodeTypes, type)?.fields || []) {
    if (spec.default !== null && spec.default !== undefined) config[spec.name] = structuredClone(spec.default);
  }
  return config;
}

export function uniqueName(doc, base) {
  const names = new Set(doc.nodes.map((node) => node.name));
  if (!names.has(base)) return base;
  let index = 2;
  while (names.has(`${base}_${index}`)) index += 1;
  return `${base}_${index}`;
}

export function newNodeId(doc) {
  const ids = new Set(doc.nodes.map((node) => node.id));
  let id;
  do id = `n${Math.random().toString(36).slice(2, 10)}`; while (ids.has(id));
  return id;
}

function text(name, value, attrs = {}) {
  return h("input", { name, value: value ?? "", autocomplete: "off", spellcheck: "false", ...attrs });
}

function area(name, value, attrs = {}) {
  const element = h("textarea", { name, rows: "4", spellcheck: "false", class: "mono", ...attrs });
  element.value = value ?? "";
  return element;
}

function select(name, options, value) {
  const element = h("select", { name }, ...options.map(([optionValue, label]) => h("option", { value: optionValue }, label)));
  element.value = value ?? options[0]?.[0] ?? "";
  return element;
}

function nodeOptions(doc, except, empty) {
  return [["", empty], ...doc.nodes.filter((node) => node.id !== except).map((node) => [node.id, `${node.name} (${node.type})`])];
}

// One config field's control, by its kind (docs/api.md, /api/meta), filled from `value`.
function control(spec, value, ctx) {
  const { doc, node } = ctx;
  const placeholder = spec.placeholder ? { placeholder: spec.placeholder } : {};
  switch (spec.kind) {
  case "textarea":
    return area(spec.name, value, { rows: String(spec.rows ?? 4), ...placeholder });
  case "json":
    return area(spec.name, JSON.stringify(value ?? {}, null, 2));
  case "node":
    return select(spec.name, nodeOptions(doc, node.id, "None"), value);
  case "select":
    return select(spec.name, spec.options, value ?? spec.default);
  case "integer":
    return text(spec.name, value ?? "", { type: "number", min: String(spec.min ?? ""), inputmode: "numeric", ...placeholder });
  case "names":
    return text(spec.name, (value || []).join(", "), placeholder);
  default: {
    // A text field may suggest a list: the editor's datalist of models (editor.js), or this form's of tools.
    const list = spec.suggest === "models" ? "wf-model-choices" : spec.suggest === "tools" ? `wf-tools-${node.id}` : null;
    return text(spec.name, value, { ...placeholder, ...(list ? { list } : {}) });
  }
  }
}

// The fields of a type's config, filled from `config`.
function configFields(type, config, ctx) {
  const kind = typeOf(ctx.nodeTypes, type);
  if (!kind?.fields.length) return [h("p", { class: "muted" }, kind?.help || `A node of type ${type}.`)];
  return kind.fields.flatMap((spec) => {
    const parts = [field(spec.label, control(spec, config[spec.name], ctx), spec.help ? hint(spec.help) : null)];
    if (spec.suggest === "tools") {
      parts.push(h("datalist", { id: `wf-tools-${ctx.node.id}` },
        ...ctx.tools.map((tool) => h("option", { value: tool.name }, tool.description || ""))));
    }
    return parts;
  });
}

function errorFields(config) {
  const retry = config.retry || {};
  return h("details", { class: "wf-errors-config", open: Boolean(config.retry || config.onError) },
    h("summary", {}, "Errors and retries"),
    field("On error", select("onError", [["fail", "Fail the run"], ["continue", "Continue (output null)"]], config.onError || "fail")),
    field("Retries", text("retryMax", retry.max ?? 0, { type: "number", min: "0", max: "10", inputmode: "numeric" })),
    field("Backoff (ms)", text("retryBackoff", retry.backoffMs ?? 0, { type: "number", min: "0", step: "100", inputmode: "numeric" })));
}

// One field's value from the form: undefined leaves the key out; throws an Error naming the field to fix.
function readField(spec, raw) {
  switch (spec.kind) {
  case "textarea":
    return raw || spec.required ? raw : undefined;
  case "json": {
    if (!raw.trim()) return undefined;
    let parsed;
    try {
      parsed = JSON.parse(raw);
    } catch (error) {
      throw new Error(`${spec.label}: not JSON (${error.message}).`);
    }
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error(`${spec.label}: give a JSON object.`);
    return parsed;
  }
  case "integer": {
    if (!raw.trim() && !spec.required) return undefined;
    const number = Number(raw);
    if (!raw.trim() || !Number.isInteger(number) || (spec.min !== undefined && number < spec.min)) {
      throw new Error(`${spec.label}: give a whole number${spec.min !== undefined ? `, at least ${spec.min}` : ""}.`);
    }
    return number;
  }
  case "names": {
    const names = raw.split(",").map((name) => name.trim()).filter(Boolean);
    return names.length ? names : undefined;
  }
  case "select":
    return raw;
  default:
    return raw.trim() || spec.required ? raw.trim() : undefined;
  }
}

// The config the form describes, or throws an Error naming the field to fix.
function readConfig(kind, form) {
  const value = (name) => form.elements[name]?.value ?? "";
  const config = {};
  for (const spec of kind?.fields || []) {
    const read = readField(spec, value(spec.name));
    if (read !== undefined) config[spec.name] = read;
  }
  if (form.elements.onError && value("onError") !== "fail") config.onError = value("onError");
  const max = Number(value("retryMax") || 0);
  const backoff = Number(value("retryBackoff") || 0);
  if (!Number.isInteger(max) || !Number.isInteger(backoff)) throw new Error("Retries and backoff are whole numbers.");
  if (max || backoff) config.retry = { max, backoffMs: backoff };
  return config;
}

function resultSection(result) {
  if (!result) return null;
  return h("section", { class: `wf-node-result ${result.state || ""}`, "aria-label": "Last run" },
    h("h3", {}, "Last run"),
    h("p", {}, `Status: ${result.status || result.state}${result.duration_ms !== undefined ? `, ${Math.round(result.duration_ms * 10) / 10} ms` : ""}`
      + `${result.attempts > 1 ? `, ${result.attempts} attempts` : ""}`),
    result.error ? h("p", { class: "error-text" }, `Error: ${result.error}`) : null,
    result.output !== undefined ? h("pre", { class: "wf-output" }, showValue(result.output)) : null);
}

function connections(doc, node, handlers) {
  const byId = new Map(doc.nodes.map((item) => [item.id, item]));
  const outgoing = doc.edges.filter((edge) => edge.from === node.id);
  const incoming = doc.edges.filter((edge) => edge.to === node.id);
  const linked = new Set(outgoing.map((edge) => edge.to));
  const candidates = doc.nodes.filter((item) => item.id !== node.id && !linked.has(item.id));
  const target = select("connectTo", [["", "Choose a node"], ...candidates.map((item) => [item.id, `${item.name} (${item.type})`])], "");
  const edgeItem = (edge, other, direction) => h("li", {}, `${direction === "to" ? "→" : "←"} ${other?.name ?? edge[direction]}`,
    " ", h("button", { type: "button", class: "small", onclick: () => handlers.onDisconnect(edge.from, edge.to) },
      `Remove edge ${direction} ${other?.name ?? edge[direction]}`));
  return h("section", { class: "wf-connections", "aria-label": "Connections" },
    h("h3", {}, "Connections"),
    incoming.length || outgoing.length ? h("ul", {},
      ...incoming.map((edge) => edgeItem(edge, byId.get(edge.from), "from")),
      ...outgoing.map((edge) => edgeItem(edge, byId.get(edge.to), "to"))) : h("p", { class: "muted" }, "Not connected."),
    h("div", { class: "inline" }, field("Connect to", target),
      h("button", { type: "button", onclick: () => target.value && handlers.onConnect(node.id, target.value) }, "Connect")));
}

/**
 * The form. options: {doc, node (the existing node, or a draft {id, type, ...} when isNew), isNew, from (id of the
 * node a new one follows), tools, nodeTypes (GET /api/meta's), result, onApply(node, fromId), onDelete(id), onClose(), onConnect, onDisconnect}.
 */
export function nodeForm(options) {
  const { doc, isNew } = options;
  let node = options.node;
  const error = h("div", { class: "form-error", role: "alert", hidden: true });
  const configBox = h("div", { class: "wf-config" });
  // data-dirty: the user has typed something not applied yet; the editor then leaves the form alone when
  // it redraws (an autosave's answer must not wipe what is being typed).
  const form = h("form", { class: "wf-node-form card", "aria-label": isNew ? "New node" : `Node ${node.name}`, novalidate: true,
    dataset: { nodeId: node.id, dirty: "" },
    oninput: () => { form.dataset.dirty = "1"; },
    onchange: () => { form.dataset.dirty = "1"; },
    onsubmit: (event) => {
      event.preventDefault();
      apply();
    },
    onkeydown: (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        options.onClose();
      }
    } });
  const nodeTypes = options.nodeTypes || [];
  const typeSelect = select("type", nodeTypes.filter((kind) => kind.name !== "input" || !isNew || !doc.nodes.some((item) => item.type === "input"))
    .map((kind) => [kind.name, kind.label]), node.type);
  const nameInput = text("name", node.name, { required: true, maxlength: "64" });
  const fromSelect = isNew ? select("from", nodeOptions(doc, null, "Nothing (connect later)"), options.from || "") : null;

  function fillConfig(type, config) {
    put(configBox, ...configFields(type, config, { doc, node, nodeTypes, tools: options.tools || [] }), errorFields(config));
  }

  typeSelect.addEventListener("change", () => {
    const type = typeSelect.value;
    if (isNew && (!nameInput.value || nameInput.value === uniqueName(doc, node.type))) nameInput.value = uniqueName(doc, type);
    node = { ...node, type };
    fillConfig(type, defaultConfig(nodeTypes, type));
  });

  function apply() {
    error.hidden = true;
    let config;
    try {
      config = readConfig(typeOf(nodeTypes, typeSelect.value), form);
    } catch (problem) {
      error.textContent = problem.message;
      error.hidden = false;
      return;
    }
    const name = nameInput.value.trim();
    if (!name) {
      error.textContent = "Give the node a name.";
      error.hidden = false;
      nameInput.focus();
      return;
    }
    form.dataset.dirty = "";
    options.onApply({ ...node, type: typeSelect.value, name, config }, fromSelect?.value || null);
  }

  fillConfig(node.type, node.config || {});
  put(form,
    h("div", { class: "wf-form-head" }, h("h2", {}, isNew ? "New node" : `Node ${node.name}`),
      h("button", { type: "button", class: "small", onclick: () => options.onClose() }, "Close")),
    isNew ? field("Type", typeSelect) : h("p", { class: "muted" }, `Type: ${typeOf(nodeTypes, node.type)?.label || node.type} · id ${node.id}`),
    field("Node name", nameInput, hint(`Letters, digits, - or _; \${name} refers to it.`)),
    configBox,
    isNew ? field("Connect from", fromSelect) : null,
    error,
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary" }, isNew ? "Add node" : "Apply"),
      isNew ? null : h("button", { type: "button", class: "danger", onclick: () => options.onDelete(node.id) }, "Delete node")),
    isNew ? null : connections(doc, node, options),
    isNew ? null : resultSection(options.result),
    isNew ? null : options.problems?.length ? h("div", { class: "error-box", role: "alert" },
      h("p", {}, "The server refused this node:"), h("ul", {}, ...options.problems.map((message) => h("li", {}, message)))) : null);
  return form;
}
