// The workflow editor (`#/workflows/<id>`): the drawn graph and the JSON view of one working document,
// saved to the server after each change (PATCH of name, description, nodes and edges; the server validates
// the whole graph on every save). A refused save keeps the change on screen, marks the nodes and edges the
// 400 names, and is retried by the next change or the Save button. Runs stream over SSE and light the
// nodes up as their events arrive.
//
// The editor owns the document and lays out the page; its parts: document.js (the document and its edits),
// graph.js (the drawing), saving.js (autosave, and the problems of a refused save), nodepanel.js with
// nodeform.js (a node's form), jsonview.js (the JSON view) and runpanel.js (runs).
import { confirmDialog, errorBox, errorText, field, h, loading, put } from "../../ui.js";
import { clone, connectNodes, disconnectNodes, documentOf, isConnected, nameOf } from "./document.js";
import { arrange, createGraph, overlapping } from "./graph.js";
import { HistoryPanel } from "./history.js";
import { JsonView } from "./jsonview.js";
import { NodePanel } from "./nodepanel.js";
import { RunPanel } from "./runpanel.js";
import { Autosave, hasProblems, noProblems, problemItems, problemsFrom } from "./saving.js";

const SAVE_DELAY_MS = 400;

export async function mountEditor(root, ctx, id) {
  const editor = new WorkflowEditor(root, ctx, id);
  await editor.start();
  return () => editor.stop();
}

// Save a JSON value as a file the browser downloads.
function download(filename, value) {
  const blob = new Blob([`${JSON.stringify(value, null, 2)}\n`], { type: "application/json" });
  const url = URL.createObjectURL(blob);
  const link = h("a", { href: url, download: filename, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

class WorkflowEditor {
  constructor(root, ctx, id) {
    this.root = root;
    this.ctx = ctx;
    this.id = id;
    this.doc = null;
    this.problems = noProblems(); // of the last refused save (saving.js)
    this.tools = [];
    this.nodeTypes = []; // GET /api/meta's node_types: the node form is drawn from them
    // The catalogue's names an llm node may name (GET /api/models): one datalist, filled when they arrive, so a
    // form opened before that still offers them.
    this.modelList = h("datalist", { id: "wf-model-choices" });
    this.selected = null; // the node selected in the graph
    this.stopped = false;
    this.autosave = new Autosave({
      send: (body) => this.ctx.api(`/api/workflows/${encodeURIComponent(this.id)}`, { method: "PATCH", body }),
      read: () => clone(this.doc),
      onSaving: () => { if (!this.stopped) this.renderStatus(); },
      onSaved: (workflow, current) => this.saved(workflow, current),
      onRefused: (error, body) => this.refused(error, body),
    });
    this.runs = new RunPanel({ ctx, id, beforeRun: async () => !this.autosave.unsaved || this.autosave.save(),
      onResults: () => this.showResults() });
    this.panel = new NodePanel(this);
    this.json = new JsonView(this);
    this.history = new HistoryPanel(this);
  }

  stop() {
    this.stopped = true;
    this.autosave.cancel();
    this.runs.stop();
    if (this.autosave.unsaved && this.doc) this.autosave.save().catch(() => {});
  }

  async start() {
    put(this.root, loading("Loading the workflow…"));
    let workflow;
    try {
      [workflow, { node_types: this.nodeTypes }] = await Promise.all([
        this.ctx.api(`/api/workflows/${encodeURIComponent(this.id)}`), this.ctx.meta()]);
    } catch (error) {
      put(this.root, h("p", {}, h("a", { href: "#/workflows" }, "← All workflows")),
        errorBox(error.status === 404 ? "There is no such workflow (or it is not yours)."
          : `The workflow could not be loaded: ${errorText(error)}`, error.status === 404 ? null : () => this.start()));
      return;
    }
    if (this.stopped) return;
    // The caller's role (owner, editor, viewer; a server without sharing says none: the owner's own).
    this.role = workflow.role || "owner";
    this.owner = workflow.owner || null;
    this.autosave.readOnly = this.role === "viewer";
    this.doc = documentOf(workflow);
    // Nodes made through the API without positions sit on one spot: spread them out to be seen.
    if (overlapping(this.doc)) {
      this.doc = { ...this.doc, ...arrange(this.doc) };
      this.autosave.changed();
    }
    this.build();
    this.refresh();
    // On a phone the whole graph is shown at first (zoom in, or scroll, to work on part of it).
    if (this.canvas.clientWidth && this.canvas.clientWidth < 600) this.zoom("fit");
    this.loadTools();
    this.loadModels();
    this.runs.loadRuns();
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
      onOpen: (id) => this.panel.openNode(id),
      onSelect: (id) => { this.selected = id; },
      onConnect: (from, to) => this.connect(from, to),
      onDisconnect: (from, to) => this.disconnect(from, to),
    });
    this.zoomLabel = h("span", { class: "wf-zoom", "aria-live": "polite" }, "100%");
    this.graphTab = h("button", { type: "button", role: "tab", id: "wf-tab-graph", "aria-controls": "wf-view-graph",
      onclick: () => this.showView("graph") }, "Graph");
    this.jsonTab = h("button", { type: "button", role: "tab", id: "wf-tab-json", "aria-controls": "wf-view-json",
      onclick: () => this.showView("json") }, "JSON");
    this.graphView = h("div", { id: "wf-view-graph", role: "tabpanel", "aria-labelledby": "wf-tab-graph", class: "wf-view" },
      h("div", { class: "wf-toolbar", role: "toolbar", "aria-label": "Graph tools" },
        h("button", { type: "button", class: "primary", onclick: () => this.panel.openNew() }, "Add node"),
        h("button", { type: "button", onclick: () => this.arrangeAll() }, "Arrange"),
        h("button", { type: "button", "aria-label": "Zoom out", onclick: () => this.zoom(1 / 1.25) }, "−"),
        this.zoomLabel,
        h("button", { type: "button", "aria-label": "Zoom in", onclick: () => this.zoom(1.25) }, "+"),
        h("button", { type: "button", onclick: () => this.zoom("fit") }, "Fit"),
        h("button", { type: "button", onclick: () => this.zoom(null) }, "Actual size")),
      this.modelList,
      h("p", { class: "wf-hint muted" }, "Drag a node to move it; drag from its right-hand dot to another node to connect them. "
        + "With the keyboard: Tab to a node, arrow keys move it (Shift: further), Enter opens its form; Delete removes a focused edge."),
      this.canvas);
    put(this.root,
      h("header", { class: "page-header wf-head" },
        h("p", {}, h("a", { href: "#/workflows" }, "← All workflows")), this.title, this.status, this.live),
      h("div", { class: "wf-details" },
        field("Workflow name", this.nameInput), field("Description", this.descriptionInput),
        h("div", { class: "actions" },
          this.role === "viewer" ? null : h("button", { type: "button", onclick: () => this.saveNow() }, "Save"),
          h("button", { type: "button", onclick: () => this.exportDoc() }, "Export"),
          this.role === "owner" ? h("button", { type: "button", onclick: () => this.ctx.share({ kind: "workflow",
            path: `/api/workflows/${encodeURIComponent(this.id)}`, label: this.doc.name }) }, "Share") : null,
          this.role === "owner" ? h("button", { type: "button", class: "danger", onclick: () => this.remove() }, "Delete workflow")
            : null)),
      this.role === "owner" ? null : h("p", { class: "notice wf-shared" }, `${this.owner?.username ?? "Its owner"} shares `
        + `this workflow with you as ${this.role === "editor" ? "an editor: you may run and change it." : "a viewer: you may run it; "
        + "your changes are not saved."}`),
      this.problemsBox,
      h("div", { class: "wf-editor" },
        h("div", { class: "wf-main" },
          h("div", { role: "tablist", "aria-label": "Editor view", class: "wf-tabs", onkeydown: (event) => this.tabKey(event) },
            this.graphTab, this.jsonTab),
          this.graphView, this.json.element),
        h("div", { class: "wf-aside" }, this.panel.element, this.history.element, this.runs.element)));
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
    this.json.element.hidden = view !== "json";
    if (view === "json") this.json.fill();
  }

  refresh() {
    this.title.textContent = this.doc.name;
    if (document.activeElement !== this.nameInput) this.nameInput.value = this.doc.name;
    if (document.activeElement !== this.descriptionInput) this.descriptionInput.value = this.doc.description;
    this.graph.setProblems(this.problems.nodes, this.problems.edges);
    this.graph.render(this.doc);
    this.graph.setStates(this.runs.nodeStates());
    this.renderProblems();
    this.panel.render({ keepTyped: true });
    this.renderStatus();
  }

  renderStatus() {
    const state = this.autosave.state;
    if (state === "saving") this.status.textContent = "Saving…";
    else if (state === "saved") this.status.textContent = "All changes saved.";
    else if (hasProblems(this.problems)) this.status.textContent = "Not saved: fix the problems below.";
    else this.status.textContent = "Changes not saved yet.";
    this.status.dataset.state = state;
  }

  renderProblems() {
    const items = problemItems(this.problems, { nameOf: (id) => nameOf(this.doc, id),
      showNode: (id) => { this.showView("graph"); this.graph.focusNode(id); } });
    this.problemsBox.hidden = !items.length;
    put(this.problemsBox, h("p", {}, "The server refused the last save:"), h("ul", {}, ...items));
  }

  // A run's results changed: the graph's node states, and the open node's "Last run".
  showResults() {
    this.graph.setStates(this.runs.nodeStates());
    if (this.panel.showsNode) this.panel.render({ keepTyped: true });
  }

  // --- edits -----------------------------------------------------------------------------------------

  // Change the document, draw it, and save it `delay` ms later (another edit meanwhile starts the wait again).
  edit(mutate, { delay = 0 } = {}) {
    mutate(this.doc);
    this.autosave.changed();
    this.refresh();
    this.autosave.schedule(delay);
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
    this.autosave.changed();
    this.refresh(); // also draws what arrived while the node was dragged
    this.autosave.schedule(SAVE_DELAY_MS);
  }

  connect(from, to) {
    if (from === to || isConnected(this.doc, from, to)) return;
    let branch = null;
    this.edit((doc) => { branch = connectNodes(doc, from, to); });
    const as = branch ? ` as its ${branch === "trueBranch" ? "true" : "false"} branch` : "";
    this.announce(`Connected ${nameOf(this.doc, from)} to ${nameOf(this.doc, to)}${as}.`);
  }

  disconnect(from, to) {
    this.edit((doc) => disconnectNodes(doc, from, to));
    this.announce(`Removed the edge from ${nameOf(this.doc, from)} to ${nameOf(this.doc, to)}.`);
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

  // The JSON view's document: drawn, then saved; resolves true when the server holds it.
  replace(doc) {
    this.doc = doc;
    this.autosave.changed();
    this.refresh();
    return this.autosave.save();
  }

  // A workflow the server already holds (saved around the autosave): shown as saved.
  adoptSaved(workflow) {
    this.doc = documentOf(workflow);
    this.autosave.changed();
    this.autosave.markSaved();
    this.setProblems(noProblems());
    this.refresh();
  }

  // --- saving ----------------------------------------------------------------------------------------

  async saveNow() {
    const ok = await this.autosave.save();
    if (ok) this.ctx.toast("Workflow saved.", "success");
    return ok;
  }

  saved(workflow, current) {
    this.setProblems(noProblems());
    if (current) this.doc = documentOf(workflow); // the server's ids and normalised values
    if (!this.stopped) this.refresh();
  }

  // A restored version (history.js): the server's workflow replaces what is shown, with nothing left to save.
  restored(workflow) {
    this.autosave.markSaved();
    this.doc = documentOf(workflow);
    this.setProblems(noProblems());
    if (!this.stopped) this.refresh();
  }

  refused(error, body) {
    if (this.stopped) return;
    this.setProblems(problemsFrom(error, body));
    this.refresh();
  }

  setProblems(problems) {
    this.problems = problems;
    if (problems.fields.has("name")) this.nameInput.setAttribute("aria-invalid", "true");
    else this.nameInput.removeAttribute("aria-invalid");
  }

  // --- export, delete, tools -------------------------------------------------------------------------

  async exportDoc() {
    if (this.autosave.unsaved && !(await this.autosave.save())) {
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
      this.autosave.markSaved(); // nothing left to save
      this.ctx.toast(`Workflow ${this.doc.name} deleted.`, "success");
      this.ctx.navigate("#/workflows");
    } catch (error) {
      this.ctx.toast(`Could not delete: ${errorText(error)}`, "error");
    }
  }

  // The models an llm node may name (aliases, then catalogue entries), for its form's suggestions.
  async loadModels() {
    try {
      const catalogue = await this.ctx.api("/api/models");
      put(this.modelList, catalogue.models.filter((entry) => entry.state !== "discovery_failed").map((entry) =>
        h("option", { value: entry.name }, entry.kind === "alias" ? `alias: ${entry.strategy}` : entry.state)));
    } catch {
      put(this.modelList);
    }
  }

  // The tools a tool node may name, for its form's suggestions.
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
}
