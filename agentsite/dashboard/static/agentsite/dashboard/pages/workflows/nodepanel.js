// The editor's side panel: the form of the node opened (nodeform.js) or of a new one, and the edits the
// form makes (add, apply, delete a node).
import { confirmDialog, h, put } from "../../ui.js";
import { nameOf, removeNode } from "./document.js";
import { freeSpot } from "./graph.js";
import { defaultConfig, newNodeId, nodeForm, uniqueName } from "./nodeform.js";

// It reads the editor's doc, tools, nodeTypes, selected (the node selected in the graph), graph, runs.results and
// problems, and edits through editor.edit(), editor.connect()/disconnect() and editor.announce().
export class NodePanel {
  constructor(editor) {
    this.editor = editor;
    this.shown = null; // {mode: "node", id} | {mode: "new", draft, from} | null
    this.element = h("aside", { class: "wf-side-panel", "aria-label": "Node" });
  }

  openNode(id) {
    this.shown = { mode: "node", id };
    this.render();
    this.element.querySelector("input, textarea, select")?.focus();
  }

  openNew() {
    const { doc, selected, nodeTypes } = this.editor;
    const type = "code";
    this.shown = { mode: "new", draft: { id: newNodeId(doc), type, name: uniqueName(doc, type), config: defaultConfig(nodeTypes, type) },
      from: selected || doc.nodes[doc.nodes.length - 1]?.id || "" };
    this.render();
    this.element.querySelector("select, input")?.focus();
  }

  close() {
    const id = this.shown?.id;
    this.shown = null;
    this.render();
    if (id) this.editor.graph.focusNode(id);
  }

  get showsNode() {
    return this.shown?.mode === "node";
  }

  // keepTyped: leave a form alone while it holds typing not applied yet (an autosave's redraw must not wipe it).
  render({ keepTyped = false } = {}) {
    const editor = this.editor;
    const current = this.element.querySelector("form.wf-node-form");
    const shownId = this.shown?.mode === "new" ? this.shown.draft.id : this.shown?.id;
    if (keepTyped && current?.dataset.dirty && current.dataset.nodeId === shownId) return;
    if (!this.shown) {
      put(this.element, h("p", { class: "muted wf-panel-hint" }, "Select a node to edit it, or add one."));
      return;
    }
    const common = {
      doc: editor.doc, tools: editor.tools, nodeTypes: editor.nodeTypes,
      onClose: () => this.close(),
      onConnect: (from, to) => editor.connect(from, to),
      onDisconnect: (from, to) => editor.disconnect(from, to),
    };
    if (this.shown.mode === "new") {
      put(this.element, nodeForm({ ...common, isNew: true, node: this.shown.draft, from: this.shown.from,
        onApply: (node, from) => this.addNode(node, from) }));
      return;
    }
    const node = editor.doc.nodes.find((item) => item.id === this.shown.id);
    if (!node) {
      this.shown = null;
      this.render();
      return;
    }
    const focused = this.element.contains(document.activeElement) ? document.activeElement.name : null;
    put(this.element, nodeForm({ ...common, isNew: false, node, result: editor.runs.results.get(node.name),
      problems: editor.problems.nodes.get(node.id),
      onApply: (updated) => this.updateNode(updated), onDelete: (id) => this.deleteNode(id) }));
    if (focused) this.element.querySelector(`[name="${CSS.escape(focused)}"]`)?.focus();
  }

  addNode(node, from) {
    const editor = this.editor;
    const near = editor.doc.nodes.find((item) => item.id === from);
    const added = { ...node, position: freeSpot(editor.doc, near) };
    this.shown = { mode: "node", id: added.id };
    editor.edit((doc) => {
      doc.nodes.push(added);
      if (from) doc.edges.push({ from, to: added.id });
    });
    editor.graph.select(added.id, false);
    editor.selected = added.id;
    editor.announce(`Added the ${added.type} node ${added.name}.`);
  }

  updateNode(updated) {
    this.editor.edit((doc) => {
      const index = doc.nodes.findIndex((node) => node.id === updated.id);
      if (index >= 0) doc.nodes[index] = { ...doc.nodes[index], name: updated.name, config: updated.config };
    });
    this.editor.announce(`Applied the changes to ${updated.name}.`);
  }

  async deleteNode(id) {
    const name = nameOf(this.editor.doc, id);
    if (!(await confirmDialog(`Delete the node ${name} and its edges?`, { confirmLabel: "Delete" }))) return;
    this.shown = null;
    this.editor.edit((doc) => removeNode(doc, id));
    this.editor.announce(`Deleted the node ${name}.`);
  }
}
