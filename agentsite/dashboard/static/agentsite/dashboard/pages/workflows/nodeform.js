// The form of one node: its name, its type's config keys (docs/api.md's node semantics), retry and onError,
// its connections, and what it did in the last run. Used for a new node (type picker, "Add node") and an
// existing one ("Apply", "Delete node"). `\${name}` in the strings here is the workflow's placeholder (a node's
// output), escaped so that JavaScript leaves it as text.
import { field, h, hint, put } from "../../ui.js";
import { showValue } from "./document.js";

export const NODE_TYPES = ["input", "llm", "tool", "condition", "code", "delay", "approval", "output"];
const TYPE_LABELS = { input: "Input", llm: "LLM", tool: "Tool", condition: "Condition", code: "Code (JavaScript)",
  delay: "Delay", approval: "Approval (a person decides)", output: "Output" };

export function defaultConfig(type) {
  return {
    llm: { prompt: `\${input}` },
    tool: { toolName: "", toolArgs: {} },
    condition: { condition: "input.length > 0" },
    code: { code: "return input;" },
    delay: { delayMs: 1000 },
    approval: { prompt: `Approve \${input}?` },
    output: { outputFormat: "text" },
  }[type] || {};
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

// The fields of a type's config, filled from `config`.
function configFields(type, config, ctx) {
  const { doc, node, tools } = ctx;
  switch (type) {
  case "llm":
    return [
      field("Prompt", area("prompt", config.prompt, { rows: "5" }), hint(`\${name} is that node's output; \${input} the run's input.`)),
      // The choices are the editor's datalist (editor.js), filled from GET /api/models.
      field("Model", text("model", config.model, { placeholder: "the agent's model", list: "wf-model-choices" }),
        hint("An alias or <connection>/<model> (Settings lists them); empty: the agent's model.")),
    ];
  case "tool": {
    const list = h("datalist", { id: `wf-tools-${node.id}` }, ...tools.map((tool) => h("option", { value: tool.name }, tool.description || "")));
    return [
      field("Tool name", text("toolName", config.toolName, { list: list.id })), list,
      field("Tool arguments (JSON)", area("toolArgs", JSON.stringify(config.toolArgs ?? {}, null, 2)),
        hint(`A JSON object; \${name} in a string is replaced by that node's output.`)),
    ];
  }
  case "condition":
    return [
      field("Condition (JavaScript expression)", area("condition", config.condition, { rows: "2" }),
        hint("Sees input and context; true takes the true branch.")),
      field("True branch", select("trueBranch", nodeOptions(doc, node.id, "None"), config.trueBranch)),
      field("False branch", select("falseBranch", nodeOptions(doc, node.id, "None"), config.falseBranch)),
    ];
  case "code":
    return [field("Code (JavaScript function body)", area("code", config.code, { rows: "7" }),
      hint("The body of function (input, context); its return value is the output."))];
  case "delay":
    return [field("Delay (ms)", text("delayMs", config.delayMs, { type: "number", min: "0", step: "100", inputmode: "numeric" }))];
  case "approval":
    return [
      field("Prompt", area("prompt", config.prompt, { rows: "3" }), hint(`What the approvers are asked; \${name} is that node's output.`)),
      field("Approvers", text("approvers", (config.approvers || []).join(", "), { placeholder: "you (the owner)" }),
        hint("User names, separated by commas; empty: you.")),
      field("Timeout (s)", text("timeout_s", config.timeout_s ?? "", { type: "number", min: "1", inputmode: "numeric", placeholder: "none" })),
      field("On timeout", select("on_timeout", [["reject", "Reject"], ["approve", "Approve"]], config.on_timeout || "reject")),
    ];
  case "output":
    return [field("Output format", select("outputFormat", [["text", "Text"], ["markdown", "Markdown"], ["json", "JSON"]],
      config.outputFormat || "text"))];
  default:
    return [h("p", { class: "muted" }, "The input node passes the run's input on. A workflow has exactly one.")];
  }
}

function errorFields(config) {
  const retry = config.retry || {};
  return h("details", { class: "wf-errors-config", open: Boolean(config.retry || config.onError) },
    h("summary", {}, "Errors and retries"),
    field("On error", select("onError", [["fail", "Fail the run"], ["continue", "Continue (output null)"]], config.onError || "fail")),
    field("Retries", text("retryMax", retry.max ?? 0, { type: "number", min: "0", max: "10", inputmode: "numeric" })),
    field("Backoff (ms)", text("retryBackoff", retry.backoffMs ?? 0, { type: "number", min: "0", step: "100", inputmode: "numeric" })));
}

// The config the form describes, or throws an Error naming the field to fix.
function readConfig(type, form) {
  const value = (name) => form.elements[name]?.value ?? "";
  const config = {};
  if (type === "llm") {
    config.prompt = value("prompt");
    if (value("model").trim()) config.model = value("model").trim();
  } else if (type === "tool") {
    config.toolName = value("toolName").trim();
    const raw = value("toolArgs").trim();
    if (raw) {
      let args;
      try {
        args = JSON.parse(raw);
      } catch (error) {
        throw new Error(`Tool arguments: not JSON (${error.message}).`);
      }
      if (!args || typeof args !== "object" || Array.isArray(args)) throw new Error("Tool arguments: give a JSON object.");
      config.toolArgs = args;
    }
  } else if (type === "condition") {
    config.condition = value("condition");
    if (value("trueBranch")) config.trueBranch = value("trueBranch");
    if (value("falseBranch")) config.falseBranch = value("falseBranch");
  } else if (type === "code") {
    config.code = value("code");
  } else if (type === "delay") {
    const delay = Number(value("delayMs"));
    if (!Number.isInteger(delay) || delay < 0) throw new Error("Delay: give a whole number of milliseconds.");
    config.delayMs = delay;
  } else if (type === "output") {
    config.outputFormat = value("outputFormat");
  } else if (type === "approval") {
    config.prompt = value("prompt");
    const approvers = value("approvers").split(",").map((name) => name.trim()).filter(Boolean);
    if (approvers.length) config.approvers = approvers;
    if (value("timeout_s").trim()) {
      const timeout = Number(value("timeout_s"));
      if (!Number.isInteger(timeout) || timeout < 1) throw new Error("Timeout: give a whole number of seconds, at least 1.");
      config.timeout_s = timeout;
    }
    if (value("on_timeout") === "approve") config.on_timeout = "approve";
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
 * node a new one follows), tools, result, onApply(node, fromId), onDelete(id), onClose(), onConnect, onDisconnect}.
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
  const typeSelect = select("type", NODE_TYPES.filter((type) => type !== "input" || !isNew || !doc.nodes.some((item) => item.type === "input"))
    .map((type) => [type, TYPE_LABELS[type]]), node.type);
  const nameInput = text("name", node.name, { required: true, maxlength: "64" });
  const fromSelect = isNew ? select("from", nodeOptions(doc, null, "Nothing (connect later)"), options.from || "") : null;

  function fillConfig(type, config) {
    put(configBox, ...configFields(type, config, { doc, node, tools: options.tools || [] }), errorFields(config));
  }

  typeSelect.addEventListener("change", () => {
    const type = typeSelect.value;
    if (isNew && (!nameInput.value || nameInput.value === uniqueName(doc, node.type))) nameInput.value = uniqueName(doc, type);
    node = { ...node, type };
    fillConfig(type, defaultConfig(type));
  });

  function apply() {
    error.hidden = true;
    let config;
    try {
      config = readConfig(typeSelect.value, form);
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
    isNew ? field("Type", typeSelect) : h("p", { class: "muted" }, `Type: ${TYPE_LABELS[node.type] || node.type} · id ${node.id}`),
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
