// The workflow editor (`#/workflows/<id>`): the drawn graph and the JSON view of one working document,
// saved to the server after each change (PATCH of name, description, nodes and edges; the server validates
// the whole graph on every save). A refused save keeps the change on screen, marks the nodes and edges the
// 400 names, and is retried by the next change or the Save button. Runs stream over SSE and light the
// nodes up as their events arrive.
import { confirmDialog, download, errorText, field, h, hint, loading, problemBox, put, stream } from "./common.js";
import { arrange, createGraph, freeSpot, overlapping } from "./graph.js";
import { defaultConfig, newNodeId, nodeForm, uniqueName } from "./nodeform.js";

const SAVE_DELAY_MS = 400;
const DOC_KEYS = ["name", "description", "nodes", "edges"];

export async function mountEditor(root, ctx, id) {
  const editor = new WorkflowEditor(root, ctx, id);
  await editor.start();
  return () => editor.stop();
}

function clone(value) {
  return JSON.parse(JSON.stringify(value));
}

function documentOf(workflow) {
  return { name: workflow.name, description: workflow.description || "", nodes: clone(workflow.nodes), edges: clone(workflow.edges) };
}

// A document the graph can draw: nodes with string ids, names and types, edges of two strings.
function drawable(doc) {
  return doc && typeof doc === "object" && Array.isArray(doc.nodes) && Array.isArray(doc.edges)
    && doc.nodes.every((node) => node && typeof node === "object" && typeof node.id === "string"
      && typeof node.type === "string" && typeof node.name === "string"
      && (node.config === undefined || (node.config && typeof node.config === "object" && !Array.isArray(node.config)))
      && (node.position === undefined || (node.position && Number.isFinite(node.position.x) && Number.isFinite(node.position.y))))
    && doc.edges.every((edge) => edge && typeof edge.from === "string" && typeof edge.to === "string");
}

function showValue(value) {
  if (value === undefined) return "";
  if (value === null) return "null";
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

class WorkflowEditor {
  constructor(root, ctx, id) {
    this.root = root;
    this.ctx = ctx;
    this.id = id;
    this.doc = null;
    this.version = 0;
    this.savedVersion = 0;
    this.saving = null;
    this.saveTimer = null;
    this.nodeProblems = new Map();
    this.edgeProblems = new Map();
    this.otherProblems = [];
    this.results = new Map(); // node name -> {state, status, duration_ms, output, error, attempts}
    this.panel = null; // {mode: "node"|"new", id}
    this.tools = [];
    this.runAbort = null;
    this.stopped = false;
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.saveTimer);
    this.runAbort?.abort();
    if (this.version !== this.savedVersion && this.doc) this.save().catch(() => {});
  }

  async start() {
    put(this.root, loading("Loading the workflow…"));
    let workflow;
    try {
      workflow = await this.ctx.api(`/api/workflows/${encodeURIComponent(this.id)}`);
    } catch (error) {
      put(this.root, h("p", {}, h("a", { href: "#/workflows" }, "← All workflows")),
        problemBox(error.status === 404 ? "There is no such workflow (or it is not yours)."
          : `The workflow could not be loaded: ${errorText(error)}`, error.status === 404 ? null : () => this.start()));
      return;
    }
    if (this.stopped) return;
    this.doc = documentOf(workflow);
    // Nodes made through the API without positions sit on one spot: spread them out to be seen.
    if (overlapping(this.doc)) {
      this.doc = { ...this.doc, ...arrange(this.doc) };
      this.changed();
    }
    this.build();
    this.refresh();
    // On a phone the whole graph is shown at first (zoom in, or scroll, to work on part of it).
    if (this.canvas.clientWidth && this.canvas.clientWidth < 600) this.zoom("fit");
    this.loadTools();
    this.loadRuns();
  }

  // --- layout ----------------------------------------------------------------------------------------

  build() {
    this.status = h("p", { class: "wf-save-status", role: "status", "aria-live": "polite" });
    this.live = h("p", { class: "visually-hidden", "aria-live": "polite" });
    this.problemsBox = h("div", { class: "wf-problems error-box", role: "alert", hidden: true });
    this.nameInput = h("input", { name: "workflowName", value: this.doc.name, maxlength: "64", autocomplete: "off",
      spellcheck: "false", onchange: () => this.setDetails() });
    this.descriptionInput = h("input", { name: "workflowDescription", value: this.doc.description, maxlength: "2000",
      onchange: () => this.setDetails() });
    this.title = h("h1", {}, this.doc.name);
    this.canvas = h("div", { class: "wf-canvas", tabindex: "-1" });
    this.graph = createGraph(this.canvas, {
      onMove: (id, position, final) => this.moveNode(id, position, final),
      onOpen: (id) => this.openNode(id),
      onSelect: (id) => { this.selected = id; },
      onConnect: (from, to) => this.connect(from, to),
      onDisconnect: (from, to) => this.disconnect(from, to),
    });
    this.zoomLabel = h("span", { class: "wf-zoom", "aria-live": "polite" }, "100%");
    this.jsonText = h("textarea", { class: "mono wf-json", rows: "24", spellcheck: "false", name: "workflowJson" });
    this.jsonError = h("div", { class: "form-error", role: "alert", hidden: true });
    this.graphTab = h("button", { type: "button", role: "tab", id: "wf-tab-graph", "aria-controls": "wf-view-graph",
      onclick: () => this.showView("graph") }, "Graph");
    this.jsonTab = h("button", { type: "button", role: "tab", id: "wf-tab-json", "aria-controls": "wf-view-json",
      onclick: () => this.showView("json") }, "JSON");
    this.graphView = h("div", { id: "wf-view-graph", role: "tabpanel", "aria-labelledby": "wf-tab-graph", class: "wf-view" },
      h("div", { class: "wf-toolbar", role: "toolbar", "aria-label": "Graph tools" },
        h("button", { type: "button", class: "primary", onclick: () => this.openNew() }, "Add node"),
        h("button", { type: "button", onclick: () => this.arrangeAll() }, "Arrange"),
        h("button", { type: "button", "aria-label": "Zoom out", onclick: () => this.zoom(1 / 1.25) }, "−"),
        this.zoomLabel,
        h("button", { type: "button", "aria-label": "Zoom in", onclick: () => this.zoom(1.25) }, "+"),
        h("button", { type: "button", onclick: () => this.zoom("fit") }, "Fit"),
        h("button", { type: "button", onclick: () => this.zoom(null) }, "Actual size")),
      h("p", { class: "wf-hint muted" }, "Drag a node to move it; drag from its right-hand dot to another node to connect them. "
        + "With the keyboard: Tab to a node, arrow keys move it (Shift: further), Enter opens its form; Delete removes a focused edge."),
      this.canvas);
    this.jsonView = h("div", { id: "wf-view-json", role: "tabpanel", "aria-labelledby": "wf-tab-json", class: "wf-view", hidden: true },
      field("Workflow JSON", this.jsonText, hint("name, description, nodes and edges; applied to the workflow on save.")),
      this.jsonError,
      h("div", { class: "actions" },
        h("button", { type: "button", class: "primary", onclick: () => this.applyJson() }, "Apply JSON"),
        h("button", { type: "button", onclick: () => this.fillJson() }, "Revert JSON")));
    this.side = h("aside", { class: "wf-side-panel", "aria-label": "Node" });
    this.runPanel = this.buildRunPanel();
    put(this.root, 
      h("header", { class: "page-header wf-head" },
        h("p", {}, h("a", { href: "#/workflows" }, "← All workflows")), this.title, this.status, this.live),
      h("div", { class: "wf-details" },
        field("Workflow name", this.nameInput), field("Description", this.descriptionInput),
        h("div", { class: "actions" },
          h("button", { type: "button", onclick: () => this.saveNow() }, "Save"),
          h("button", { type: "button", onclick: () => this.exportDoc() }, "Export"),
          h("button", { type: "button", class: "danger", onclick: () => this.remove() }, "Delete workflow"))),
      this.problemsBox,
      h("div", { class: "wf-editor" },
        h("div", { class: "wf-main" },
          h("div", { role: "tablist", "aria-label": "Editor view", class: "wf-tabs", onkeydown: (event) => this.tabKey(event) },
            this.graphTab, this.jsonTab),
          this.graphView, this.jsonView),
        h("div", { class: "wf-aside" }, this.side, this.runPanel)));
    this.showView("graph");
  }

  // The tabs pattern: arrow keys move between the two tabs (and show the one reached).
  tabKey(event) {
    if (!["ArrowLeft", "ArrowRight", "Home", "End"].includes(event.key)) return;
    event.preventDefault();
    const next = this.view === "graph" ? "json" : "graph";
    const view = event.key === "Home" ? "graph" : event.key === "End" ? "json" : next;
    this.showView(view);
    (view === "graph" ? this.graphTab : this.jsonTab).focus();
  }

  showView(view) {
    this.view = view;
    this.graphTab.setAttribute("aria-selected", String(view === "graph"));
    this.jsonTab.setAttribute("aria-selected", String(view === "json"));
    this.graphTab.tabIndex = view === "graph" ? 0 : -1;
    this.jsonTab.tabIndex = view === "json" ? 0 : -1;
    this.graphView.hidden = view !== "graph";
    this.jsonView.hidden = view !== "json";
    if (view === "json") this.fillJson();
  }

  fillJson() {
    this.jsonText.value = JSON.stringify(this.doc, null, 2);
    this.jsonError.hidden = true;
  }

  refresh() {
    this.title.textContent = this.doc.name;
    if (document.activeElement !== this.nameInput) this.nameInput.value = this.doc.name;
    if (document.activeElement !== this.descriptionInput) this.descriptionInput.value = this.doc.description;
    this.graph.setProblems(this.nodeProblems, this.edgeProblems);
    this.graph.render(this.doc);
    this.graph.setStates(this.nodeStates());
    this.renderProblems();
    this.renderPanel({ keepTyped: true });
    this.renderStatus();
  }

  renderStatus() {
    if (this.saving) this.status.textContent = "Saving…";
    else if (this.version === this.savedVersion) this.status.textContent = "All changes saved.";
    else if (this.nodeProblems.size || this.edgeProblems.size || this.otherProblems.length) this.status.textContent = "Not saved: fix the problems below.";
    else this.status.textContent = "Changes not saved yet.";
    this.status.dataset.state = this.saving ? "saving" : this.version === this.savedVersion ? "saved" : "unsaved";
  }

  renderProblems() {
    const items = [];
    const nameOf = (id) => this.doc.nodes.find((node) => node.id === id)?.name ?? id;
    for (const [id, messages] of this.nodeProblems) {
      for (const message of messages) {
        items.push(h("li", {}, message, " ", h("button", { type: "button", class: "small",
          onclick: () => { this.showView("graph"); this.graph.focusNode(id); } }, `Show ${nameOf(id)}`)));
      }
    }
    for (const [key, messages] of this.edgeProblems) items.push(...messages.map((message) => h("li", {}, `Edge ${key}: ${message}`)));
    items.push(...this.otherProblems.map((message) => h("li", {}, message)));
    this.problemsBox.hidden = !items.length;
    put(this.problemsBox, h("p", {}, "The server refused the last save:"), h("ul", {}, ...items));
  }

  // --- edits -----------------------------------------------------------------------------------------

  changed() {
    this.version += 1;
  }

  edit(mutate, { delay = 0 } = {}) {
    mutate(this.doc);
    this.changed();
    this.refresh();
    this.scheduleSave(delay);
  }

  setDetails() {
    const name = this.nameInput.value.trim();
    const description = this.descriptionInput.value;
    if (name === this.doc.name && description === this.doc.description) return;
    this.edit((doc) => { doc.name = name; doc.description = description; });
  }

  moveNode(id, position, final) {
    const node = this.doc.nodes.find((item) => item.id === id);
    if (!node) return;
    node.position = { x: position.x, y: position.y };
    if (!final) return; // the graph has drawn it; save when the drag or key press ends
    this.changed();
    this.refresh(); // also draws what arrived while the node was dragged
    this.scheduleSave(SAVE_DELAY_MS);
  }

  connect(from, to) {
    if (from === to || this.doc.edges.some((edge) => edge.from === from && edge.to === to)) return;
    // A condition's way out is one of its branches: the first free one becomes this edge.
    const source = this.doc.nodes.find((node) => node.id === from);
    const branch = source?.type === "condition"
      ? ["trueBranch", "falseBranch"].find((key) => !source.config?.[key] || source.config[key] === to) : null;
    this.edit((doc) => {
      doc.edges.push({ from, to });
      if (branch) {
        const node = doc.nodes.find((item) => item.id === from);
        node.config = { ...node.config, [branch]: to };
      }
    });
    this.announce(`Connected ${this.nameOf(from)} to ${this.nameOf(to)}${branch ? ` as its ${branch === "trueBranch" ? "true" : "false"} branch` : ""}.`);
  }

  disconnect(from, to) {
    this.edit((doc) => {
      doc.edges = doc.edges.filter((edge) => !(edge.from === from && edge.to === to));
      for (const node of doc.nodes) {
        // A condition's branch is an edge too: removing the edge removes the branch.
        if (node.id === from && node.type === "condition") {
          for (const key of ["trueBranch", "falseBranch"]) if (node.config?.[key] === to) delete node.config[key];
        }
      }
    });
    this.announce(`Removed the edge from ${this.nameOf(from)} to ${this.nameOf(to)}.`);
  }

  nameOf(id) {
    return this.doc.nodes.find((node) => node.id === id)?.name ?? id;
  }

  // Edits are announced to screen readers in the editor's own live region: a toast for every drag or
  // connection would bury the ones that matter.
  announce(message) {
    this.live.textContent = message;
  }

  arrangeAll() {
    this.edit((doc) => { doc.nodes = arrange(doc).nodes; });
  }

  zoom(factor) {
    const scale = factor === "fit" ? this.graph.fit(this.canvas.clientWidth) : this.graph.zoom(factor);
    this.zoomLabel.textContent = `${Math.round(scale * 100)}%`;
  }

  // --- the side panel: a node's form ------------------------------------------------------------------

  openNode(id) {
    this.panel = { mode: "node", id };
    this.renderPanel();
    this.side.querySelector("input, textarea, select")?.focus();
  }

  openNew() {
    const type = "code";
    this.panel = { mode: "new", draft: { id: newNodeId(this.doc), type, name: uniqueName(this.doc, type), config: defaultConfig(type) },
      from: this.selected || this.doc.nodes[this.doc.nodes.length - 1]?.id || "" };
    this.renderPanel();
    this.side.querySelector("select, input")?.focus();
  }

  closePanel() {
    const id = this.panel?.id;
    this.panel = null;
    this.renderPanel();
    if (id) this.graph.focusNode(id);
  }

  renderPanel({ keepTyped = false } = {}) {
    const current = this.side.querySelector("form.wf-node-form");
    const shown = this.panel?.mode === "new" ? this.panel.draft.id : this.panel?.id;
    if (keepTyped && current?.dataset.dirty && current.dataset.nodeId === shown) return;
    if (!this.panel) {
      put(this.side, h("p", { class: "muted wf-panel-hint" }, "Select a node to edit it, or add one."));
      return;
    }
    const common = {
      doc: this.doc, tools: this.tools,
      onClose: () => this.closePanel(),
      onConnect: (from, to) => this.connect(from, to),
      onDisconnect: (from, to) => this.disconnect(from, to),
    };
    if (this.panel.mode === "new") {
      put(this.side, nodeForm({ ...common, isNew: true, node: this.panel.draft, from: this.panel.from,
        onApply: (node, from) => this.addNode(node, from) }));
      return;
    }
    const node = this.doc.nodes.find((item) => item.id === this.panel.id);
    if (!node) {
      this.panel = null;
      this.renderPanel();
      return;
    }
    const focused = this.side.contains(document.activeElement) ? document.activeElement.name : null;
    put(this.side, nodeForm({ ...common, isNew: false, node, result: this.results.get(node.name),
      problems: this.nodeProblems.get(node.id),
      onApply: (updated) => this.updateNode(updated), onDelete: (id) => this.deleteNode(id) }));
    if (focused) this.side.querySelector(`[name="${CSS.escape(focused)}"]`)?.focus();
  }

  addNode(node, from) {
    const near = this.doc.nodes.find((item) => item.id === from);
    const added = { ...node, position: freeSpot(this.doc, near) };
    this.panel = { mode: "node", id: added.id };
    this.edit((doc) => {
      doc.nodes.push(added);
      if (from) doc.edges.push({ from, to: added.id });
    });
    this.graph.select(added.id, false);
    this.selected = added.id;
    this.announce(`Added the ${added.type} node ${added.name}.`);
  }

  updateNode(updated) {
    this.edit((doc) => {
      const index = doc.nodes.findIndex((node) => node.id === updated.id);
      if (index >= 0) doc.nodes[index] = { ...doc.nodes[index], name: updated.name, config: updated.config };
    });
    this.announce(`Applied the changes to ${updated.name}.`);
  }

  async deleteNode(id) {
    const name = this.nameOf(id);
    if (!(await confirmDialog(`Delete the node ${name} and its edges?`, { confirmLabel: "Delete" }))) return;
    this.panel = null;
    this.edit((doc) => {
      doc.nodes = doc.nodes.filter((node) => node.id !== id);
      doc.edges = doc.edges.filter((edge) => edge.from !== id && edge.to !== id);
      for (const node of doc.nodes) {
        for (const key of ["trueBranch", "falseBranch"]) if (node.config?.[key] === id) delete node.config[key];
      }
    });
    this.announce(`Deleted the node ${name}.`);
  }

  // --- saving ----------------------------------------------------------------------------------------

  scheduleSave(delay) {
    clearTimeout(this.saveTimer);
    this.saveTimer = setTimeout(() => this.save().catch(() => {}), delay);
  }

  async saveNow() {
    clearTimeout(this.saveTimer);
    const ok = await this.save();
    if (ok) this.ctx.toast("Workflow saved.", "success");
    return ok;
  }

  // Save the working document; true when the server holds it. One save at a time: a change made while a
  // save is under way is saved right after it.
  async save() {
    clearTimeout(this.saveTimer);
    if (this.saving) {
      await this.saving.catch(() => {});
      return this.save();
    }
    if (this.version === this.savedVersion) return true;
    const version = this.version;
    const body = clone(this.doc);
    this.saving = this.ctx.api(`/api/workflows/${encodeURIComponent(this.id)}`, { method: "PATCH", body });
    if (!this.stopped) this.renderStatus();
    try {
      const workflow = await this.saving;
      this.saving = null;
      this.clearProblems();
      this.savedVersion = version;
      if (this.version === version) this.doc = documentOf(workflow); // the server's ids and normalised values
      if (!this.stopped) this.refresh();
      return true;
    } catch (error) {
      this.saving = null;
      if (this.stopped) return false;
      this.takeProblems(error, body);
      this.refresh();
      return false;
    }
  }

  clearProblems() {
    this.nodeProblems = new Map();
    this.edgeProblems = new Map();
    this.otherProblems = [];
    this.nameInput.removeAttribute("aria-invalid");
  }

  // A 400's details name `node:<id>`, `edge:<from>-><to>`, `nodes[i]`, `edges[i]`, `workflow` or a field.
  takeProblems(error, body) {
    this.clearProblems();
    const details = error?.status === 400 && error.details && typeof error.details === "object" ? error.details : null;
    if (!details || !Object.keys(details).length) {
      this.otherProblems = [errorText(error)];
      return;
    }
    for (const [key, value] of Object.entries(details)) {
      const messages = (Array.isArray(value) ? value : [value]).map(String);
      let match;
      if ((match = /^node:(.+)$/.exec(key))) this.addProblem(this.nodeProblems, match[1], messages);
      else if ((match = /^edge:(.+)$/.exec(key))) this.addProblem(this.edgeProblems, match[1], messages);
      else if ((match = /^nodes\[(\d+)\]$/.exec(key)) && body.nodes?.[match[1]]?.id) this.addProblem(this.nodeProblems, body.nodes[match[1]].id, messages);
      else if ((match = /^edges\[(\d+)\]$/.exec(key)) && body.edges?.[match[1]]) {
        const edge = body.edges[match[1]];
        this.addProblem(this.edgeProblems, `${edge.from}->${edge.to}`, messages);
      } else {
        if (key === "name") this.nameInput.setAttribute("aria-invalid", "true");
        this.otherProblems.push(...messages.map((message) => (key === "workflow" ? message : `${key}: ${message}`)));
      }
    }
  }

  addProblem(map, key, messages) {
    map.set(key, [...(map.get(key) || []), ...messages]);
  }

  // --- JSON view, export, delete ----------------------------------------------------------------------

  async applyJson() {
    this.jsonError.hidden = true;
    let parsed;
    try {
      parsed = JSON.parse(this.jsonText.value);
    } catch (error) {
      this.showJsonError(`Not valid JSON: ${error.message}`);
      return;
    }
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) {
      this.showJsonError("Give a JSON object with name, description, nodes and edges.");
      return;
    }
    // An export document may be pasted as is: its format and version say what it is, nothing to apply.
    const unknown = Object.keys(parsed).filter((key) => !DOC_KEYS.includes(key) && key !== "format" && key !== "version");
    if (unknown.length) {
      this.showJsonError(`Unknown keys: ${unknown.join(", ")}. Only ${DOC_KEYS.join(", ")} are applied.`);
      return;
    }
    const proposed = { ...this.doc };
    for (const key of DOC_KEYS) if (key in parsed) proposed[key] = parsed[key];
    if (!drawable(proposed)) {
      // Not something the graph can draw: let the server say what is wrong, without adopting it.
      try {
        const workflow = await this.ctx.api(`/api/workflows/${encodeURIComponent(this.id)}`, { method: "PATCH", body: proposed });
        this.doc = documentOf(workflow);
        this.savedVersion = ++this.version;
        this.clearProblems();
        this.refresh();
        this.fillJson();
        this.ctx.toast("JSON applied and saved.", "success");
      } catch (error) {
        this.showJsonError(`Not applied: ${errorText(error)}`);
      }
      return;
    }
    proposed.nodes = proposed.nodes.map((node) => ({ config: {}, ...node, position: node.position || { x: 0, y: 0 } }));
    this.doc = overlapping(proposed) ? { ...proposed, nodes: arrange(proposed).nodes } : proposed;
    this.changed();
    this.refresh();
    if (await this.save()) {
      this.fillJson();
      this.ctx.toast("JSON applied and saved.", "success");
    } else {
      this.showJsonError("Applied to the editor, but the server refused it: see the problems above; the nodes named are marked in the graph.");
    }
  }

  showJsonError(message) {
    this.jsonError.textContent = message;
    this.jsonError.hidden = false;
  }

  async exportDoc() {
    if (this.version !== this.savedVersion && !(await this.save())) {
      this.ctx.toast("Export is of the saved workflow: fix the problems first.", "error");
      return;
    }
    try {
      const document = await this.ctx.api(`/api/workflows/${encodeURIComponent(this.id)}/export`);
      download(`${document.name}.workflow.json`, document);
    } catch (error) {
      this.ctx.toast(`Export failed: ${errorText(error)}`, "error");
    }
  }

  async remove() {
    if (!(await confirmDialog(`Delete the workflow ${this.doc.name} and its runs?`, { confirmLabel: "Delete" }))) return;
    try {
      await this.ctx.api(`/api/workflows/${encodeURIComponent(this.id)}`, { method: "DELETE" });
      this.version = this.savedVersion; // nothing left to save
      this.ctx.toast(`Workflow ${this.doc.name} deleted.`, "success");
      this.ctx.navigate("#/workflows");
    } catch (error) {
      this.ctx.toast(`Could not delete: ${errorText(error)}`, "error");
    }
  }

  async loadTools() {
    try {
      const [tools, servers] = await Promise.all([this.ctx.api("/api/mcp/tools"), this.ctx.api("/api/mcp/servers")]);
      const remote = new Set(servers.servers.map((server) => server.name));
      // The registry's name of an MCP server's tool is server__tool; built-ins and plugins keep their own.
      this.tools = tools.tools.map((item) => ({ name: remote.has(item.server) ? `${item.server}__${item.tool.name}` : item.tool.name,
        description: item.tool.description }));
    } catch {
      this.tools = [];
    }
  }

  // --- runs ------------------------------------------------------------------------------------------

  buildRunPanel() {
    this.runInput = h("textarea", { name: "runInput", rows: "3" });
    this.runButton = h("button", { type: "submit", class: "primary" }, "Run");
    this.stopButton = h("button", { type: "button", disabled: true, onclick: () => this.runAbort?.abort() }, "Stop");
    this.runStatus = h("p", { class: "wf-run-status", role: "status", "aria-live": "polite" });
    this.runOutput = h("div", { class: "wf-run-output" });
    this.runTrace = h("ol", { class: "wf-trace", "aria-label": "Node results" });
    this.runList = h("ul", { class: "wf-runs" });
    return h("section", { class: "card wf-run", "aria-labelledby": "wf-run-title" },
      h("h2", { id: "wf-run-title" }, "Run"),
      h("form", { novalidate: true, onsubmit: (event) => { event.preventDefault(); this.run(); } },
        field("Run input", this.runInput),
        h("div", { class: "actions" }, this.runButton, this.stopButton)),
      this.runStatus, this.runOutput, this.runTrace,
      h("details", { class: "wf-recent", ontoggle: (event) => event.currentTarget.open && this.loadRuns() },
        h("summary", {}, "Recent runs"), this.runList));
  }

  nodeStates() {
    const states = new Map();
    for (const [name, result] of this.results) {
      const timing = result.duration_ms !== undefined ? ` · ${Math.round(result.duration_ms)} ms` : "";
      const word = { running: "running…", done: "done", error: "error", cancelled: "cancelled" }[result.state] || result.state;
      states.set(name, { state: result.state, text: `${word}${timing}` });
    }
    return states;
  }

  showResults() {
    this.graph.setStates(this.nodeStates());
    const order = [...this.results.keys()];
    put(this.runTrace, ...order.map((name) => {
      const result = this.results.get(name);
      return h("li", { class: `wf-trace-item ${result.state}`, "data-node": name },
        h("div", { class: "wf-trace-head" }, h("strong", {}, name),
          h("span", { class: `badge status ${result.state}` }, result.state),
          result.duration_ms !== undefined ? h("span", { class: "muted" }, `${Math.round(result.duration_ms * 10) / 10} ms`) : null,
          result.attempts > 1 ? h("span", { class: "muted" }, `${result.attempts} attempts`) : null),
        result.error ? h("p", { class: "error-text" }, result.error) : null,
        result.output !== undefined ? h("pre", { class: "wf-output" }, showValue(result.output)) : null);
    }));
    if (this.panel?.mode === "node") this.renderPanel({ keepTyped: true });
  }

  async run() {
    if (this.runAbort) return;
    if (this.version !== this.savedVersion && !(await this.save())) {
      this.runStatus.textContent = "Not run: the workflow has unsaved problems (see above).";
      return;
    }
    this.results = new Map();
    this.showResults();
    put(this.runOutput);
    const controller = new AbortController();
    this.runAbort = controller;
    this.runButton.disabled = true;
    this.stopButton.disabled = false;
    this.runStatus.textContent = "Running…";
    let finished = null;
    let failure = null;
    try {
      await stream(`/api/workflows/${encodeURIComponent(this.id)}/run`, {
        body: { input: this.runInput.value, stream: true }, signal: controller.signal,
        onEvent: ({ event, data }) => {
          if (this.stopped) return;
          if (event === "done") finished = data.run;
          else if (event === "error") failure = data;
          else this.onRunEvent(event, data);
        },
      });
      if (finished) this.showRun(finished);
      else throw Object.assign(new Error(failure?.message || "The run ended without a result."), { code: failure?.code });
    } catch (error) {
      if (this.stopped) return;
      if (controller.signal.aborted) {
        for (const result of this.results.values()) if (result.state === "running") result.state = "cancelled";
        this.showResults();
        this.runStatus.textContent = "Stopped: the run was cancelled.";
      } else {
        this.runStatus.textContent = `The run failed: ${errorText(error)}`;
        this.ctx.toast(`The run failed: ${errorText(error)}`, "error");
      }
    } finally {
      this.runAbort = null;
      if (!this.stopped) {
        this.runButton.disabled = false;
        this.stopButton.disabled = true;
        this.loadRuns();
      }
    }
  }

  onRunEvent(event, data) {
    if (event === "run_started") {
      this.runStatus.textContent = "Running…";
    } else if (event === "node_started") {
      this.results.set(data.node, { state: "running" });
      this.showResults();
    } else if (event === "delta") {
      const result = this.results.get(data.node) || { state: "running" };
      result.output = `${result.output || ""}${data.content}`;
      this.results.set(data.node, result);
      this.showResults();
    } else if (event === "node_finished") {
      const state = { success: "done", error: "error", cancelled: "cancelled" }[data.status] || data.status;
      this.results.set(data.node, { ...(this.results.get(data.node) || {}), state, status: data.status,
        duration_ms: data.duration_ms, output: data.output });
      this.showResults();
    }
  }

  // A finished run (streamed or picked from the recent runs): its trace, outputs, error and output.
  showRun(run) {
    this.results = new Map();
    for (const entry of run.trace) {
      const state = { success: "done", error: "error", cancelled: "cancelled", running: "running" }[entry.status] || entry.status;
      this.results.set(entry.node, { state, status: entry.status, duration_ms: entry.duration_ms, attempts: entry.attempts,
        error: entry.error, output: entry.node in run.outputs ? run.outputs[entry.node] : undefined });
    }
    this.showResults();
    const words = { success: "The run succeeded", error: "The run failed", cancelled: "The run was cancelled" };
    const took = run.started_at && run.finished_at ? ` in ${((Date.parse(run.finished_at) - Date.parse(run.started_at)) / 1000).toFixed(2)} s` : "";
    this.runStatus.textContent = `${words[run.status] || `Run ${run.status}`}${took}.`;
    put(this.runOutput, 
      run.error ? h("p", { class: "error-text", role: "alert" }, run.error.node ? `${run.error.node}: ${run.error.message}` : run.error.message) : null,
      run.output !== null && run.output !== undefined ? h("div", { class: "wf-final" }, h("h3", {}, "Output"),
        h("pre", { class: "wf-output wf-final-output" }, showValue(run.output))) : null);
  }

  async loadRuns() {
    let runs;
    try {
      runs = (await this.ctx.api(`/api/workflows/${encodeURIComponent(this.id)}/runs?limit=10`)).results;
    } catch {
      return;
    }
    if (this.stopped) return;
    put(this.runList, ...(runs.length ? runs.map((run) => h("li", {},
      h("button", { type: "button", class: "link", onclick: () => this.showRun(run) },
        `${new Date(run.started_at || run.finished_at || Date.now()).toLocaleString()} · ${run.status}`),
      run.input ? h("span", { class: "muted" }, ` input: ${run.input.slice(0, 40)}`) : null))
      : [h("li", { class: "muted" }, "No runs yet.")]));
  }
}
