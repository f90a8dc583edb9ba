// The agent editor's pickers: the model (GET /api/models), the tools (GET /api/mcp/tools) and the knowledge
// collections (GET /api/kb/collections). Each is a control with value() and set(value), lists what the server
// offers the user, keeps an agent's entry the user cannot see (shown as such, still checked) and marks the
// entries a refused save names by index (`tools.2`, `knowledge.0`).
import { listAll } from "../../api.js";
import { errorText, h, put } from "../../ui.js";

export const EVERY_TOOL = "*";
// The knowledge search is not an allowlist entry: an agent's knowledge is its collections.
const NOT_OFFERED = new Set(["kb_search"]);
const WORKFLOW_SOURCE = "workflows";
const WORKFLOW_FUNCTION = "workflow__";

let pickers = 0;

// A tool listed by GET /api/mcp/tools as the allowlist names it: `<server>/<tool>` for an MCP server's,
// `workflow:<name>` for a workflow, the plain name for a built-in or a plugin's.
export function allowlistEntry(item, mcpServers) {
  const name = item.tool.name;
  if (mcpServers.has(item.server)) return { entry: `${item.server}/${name}`, group: `MCP server ${item.server}` };
  if (item.server === WORKFLOW_SOURCE && name.startsWith(WORKFLOW_FUNCTION)) {
    return { entry: `workflow:${name.slice(WORKFLOW_FUNCTION.length)}`, group: "Workflows" };
  }
  if (item.server === "builtin") return { entry: name, group: "Built-in" };
  return { entry: name, group: item.server.startsWith("plugin:") ? `Plugin ${item.server.slice(7)}` : item.server };
}

// A list of checkboxes, one per choice; choices the value names that are not offered are kept, marked.
class CheckList {
  constructor({ legend, name, unknownLabel }) {
    this.number = ++pickers;
    this.name = name;
    this.unknownLabel = unknownLabel;
    this.choices = []; // {value, label, group, note}
    this.values = [];
    this.readOnly = false;
    this.problems = new Map(); // value -> messages
    this.rowCount = 0;
    this.list = h("div", { class: "agent-checklist" });
    this.status = h("div", { class: "agent-checklist-status" });
    this.element = h("fieldset", { class: "agent-picker", dataset: { picker: name } },
      h("legend", {}, legend), this.status, this.list);
  }

  set(values) {
    this.values = [...(values || [])];
    this.render();
  }

  value() {
    return [...this.values];
  }

  setReadOnly(readOnly) {
    this.readOnly = readOnly;
    this.render();
  }

  // problems: {index: [messages]} of the list as last sent (`sent`).
  markProblems(problems, sent) {
    this.problems = new Map(Object.entries(problems).map(([index, messages]) => [sent[Number(index)], messages]));
    this.render();
  }

  toggle(value, on) {
    this.values = on ? [...this.values.filter((item) => item !== value), value] : this.values.filter((item) => item !== value);
    this.problems.delete(value);
  }

  rows() {
    const offered = new Set(this.choices.map((choice) => choice.value));
    const unknown = this.values.filter((value) => !offered.has(value) && !this.hidden(value))
      .map((value) => ({ value, label: this.unknownLabel(value), group: "Not available to you", unknown: true }));
    return [...this.choices, ...unknown];
  }

  hidden() {
    return false;
  }

  render() {
    const groups = new Map();
    for (const row of this.rows()) {
      if (!groups.has(row.group)) groups.set(row.group, []);
      groups.get(row.group).push(row);
    }
    put(this.list, [...groups].map(([group, rows]) => h("div", { class: "agent-checklist-group" },
      group ? h("p", { class: "agent-checklist-head" }, group) : null,
      rows.map((row) => this.row(row)))));
  }

  row(row) {
    // Ids from the value's own characters, and a count: two values may differ only in what an id cannot hold.
    const id = `${this.name}-${this.number}-${++this.rowCount}-${row.value.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    const problem = this.problems.get(row.value);
    const input = h("input", { type: "checkbox", id, value: row.value, checked: this.values.includes(row.value),
      disabled: this.readOnly || this.disabledRow(row), "aria-invalid": problem ? "true" : null,
      onchange: (event) => { this.toggle(row.value, event.currentTarget.checked); this.changed?.(); } });
    return h("div", { class: ["field check agent-choice", problem && "invalid"], dataset: { choice: row.value } }, input,
      h("label", { for: id }, h("span", { class: "agent-choice-name" }, row.label),
        row.note ? h("span", { class: "muted agent-choice-note" }, ` ${row.note}`) : null),
      problem ? h("p", { class: "agent-field-error", role: "alert" }, problem.join(" ")) : null);
  }

  disabledRow() {
    return false;
  }
}

// The tools an agent may call: "every tool (*)", then each tool the user may give, grouped by where it comes from.
export class ToolPicker extends CheckList {
  constructor({ ctx }) {
    super({ legend: "Tools", name: "tools", unknownLabel: (value) => `${value} (not available to you)` });
    this.ctx = ctx;
    this.every = h("input", { type: "checkbox", id: `tools-${this.number}-every`,
      onchange: (event) => { this.toggle(EVERY_TOOL, event.currentTarget.checked); this.render(); this.changed?.(); } });
    this.element.insertBefore(h("div", { class: "field check agent-choice agent-every-tool" }, this.every,
      h("label", { for: this.every.id }, "Every tool (*)", h("span", { class: "muted" }, " every tool the person chatting may use"))),
    this.list);
  }

  async load() {
    put(this.status, h("p", { class: "muted" }, "Loading the tools…"));
    try {
      const [tools, servers] = await Promise.all([this.ctx.api("/api/mcp/tools"),
        this.ctx.api("/api/mcp/servers").catch(() => ({ servers: [] }))]);
      const remote = new Set((servers.servers || []).map((server) => server.name));
      this.choices = tools.tools.filter((item) => !(item.server === "builtin" && NOT_OFFERED.has(item.tool.name)))
        .map((item) => {
          const { entry, group } = allowlistEntry(item, remote);
          return { value: entry, label: entry, group, note: item.tool.description ? `— ${firstSentence(item.tool.description)}` : "" };
        });
      put(this.status);
    } catch (error) {
      this.choices = [];
      put(this.status, h("p", { class: "form-error" }, `The tools could not be listed: ${errorText(error)}`));
    }
    this.render();
  }

  hidden(value) {
    return value === EVERY_TOOL;
  }

  disabledRow() {
    return this.values.includes(EVERY_TOOL);
  }

  render() {
    this.every.checked = this.values.includes(EVERY_TOOL);
    this.every.disabled = this.readOnly;
    const problem = this.problems.get(EVERY_TOOL);
    this.every.toggleAttribute("aria-invalid", Boolean(problem));
    super.render();
    if (!this.rows().length) put(this.list, h("p", { class: "muted" }, "No tools to give."));
  }
}

// The knowledge collections searched on each turn: those the user may read.
export class CollectionPicker extends CheckList {
  constructor({ ctx }) {
    super({ legend: "Knowledge collections", name: "knowledge", unknownLabel: (value) => `A collection you cannot read (${value})` });
    this.ctx = ctx;
  }

  async load() {
    put(this.status, h("p", { class: "muted" }, "Loading the collections…"));
    try {
      const collections = await listAll("/api/kb/collections?limit=200", { max: 5000 });
      this.choices = collections.map((collection) => ({ value: String(collection.id), label: collection.name,
        group: "", note: collection.owner && String(collection.owner.id) !== String(this.ctx.user?.id)
          ? `(${collection.owner.username}'s)` : collection.personal ? "(your personal collection)" : "" }));
      put(this.status);
    } catch (error) {
      this.choices = [];
      put(this.status, h("p", { class: "form-error" }, `The collections could not be listed: ${errorText(error)}`));
    }
    this.render();
  }

  render() {
    super.render();
    if (!this.rows().length) put(this.list, h("p", { class: "muted" }, "No collections: add one on the Knowledge page."));
  }
}

// The model: the deployment's default (empty) or a catalogue name; a stored name no longer offered stays shown.
export class ModelSelect {
  constructor({ ctx, id }) {
    this.ctx = ctx;
    this.catalogue = { default: "", models: [] };
    this.current = "";
    this.select = h("select", { id, name: "model", onchange: () => { this.current = this.select.value; } });
    this.render();
  }

  async load() {
    try {
      this.catalogue = await this.ctx.api("/api/models");
    } catch (error) {
      this.catalogue = { default: "", models: [], error: errorText(error) };
    }
    this.render();
  }

  set(value) {
    this.current = value || "";
    this.render();
  }

  value() {
    return this.select.value;
  }

  render() {
    const usable = this.catalogue.models.filter((entry) => entry.state !== "discovery_failed");
    const known = usable.some((entry) => entry.name === this.current);
    put(this.select,
      h("option", { value: "" }, this.catalogue.default ? `Deployment default (${this.catalogue.default})` : "Deployment default"),
      this.current && !known ? h("option", { value: this.current }, `${this.current} (not available)`) : null,
      usable.map((entry) => h("option", { value: entry.name }, entry.kind === "alias" ? `${entry.name} (alias)` : entry.name)));
    this.select.value = this.current;
    this.select.title = this.catalogue.error ? `The models could not be listed: ${this.catalogue.error}` : "";
  }
}

function firstSentence(text) {
  const sentence = String(text).split(/(?<=\.)\s/)[0];
  return sentence.length > 120 ? `${sentence.slice(0, 117)}…` : sentence;
}
