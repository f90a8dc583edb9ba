// Saving the editor's document: the autosave loop, and what a refused save names.
import { errorText, h } from "../../ui.js";

// Edits are counted in versions: the document is saved when the version saved is the version edited.
// One save at a time: a save asked for while one is under way waits for it, then saves what changed
// meanwhile. A save's answer replaces the document only if nobody edited it since (onSaved's `current`).
//
// options: send(body) -> Promise of the workflow the server holds; read() -> a copy of the document to send;
// onSaving(); onSaved(workflow, current); onRefused(error, body). The owner checks whether it still shows.
export class Autosave {
  constructor({ send, read, onSaving, onSaved, onRefused }) {
    Object.assign(this, { send, read, onSaving, onSaved, onRefused });
    this.version = 0;
    this.savedVersion = 0;
    this.saving = null; // the PATCH under way
    this.timer = null;
    this.readOnly = false; // a viewer's: edits stay on screen, nothing is sent

  }

  get unsaved() {
    return this.version !== this.savedVersion;
  }

  // "saving", "saved" or "unsaved".
  get state() {
    if (this.saving) return "saving";
    return this.unsaved ? "unsaved" : "saved";
  }

  changed() {
    this.version += 1;
  }

  // The server already holds this version (saved by other means), or it is gone: nothing to save.
  markSaved() {
    this.savedVersion = this.version;
  }

  schedule(delay) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.save().catch(() => {}), delay);
  }

  cancel() {
    clearTimeout(this.timer);
  }

  // Save the document; true when the server holds the version edited last.
  async save() {
    clearTimeout(this.timer);
    if (this.saving) {
      await this.saving.catch(() => {});
      return this.save();
    }
    if (!this.unsaved || this.readOnly) return true;
    const version = this.version;
    const body = this.read();
    this.saving = this.send(body);
    this.onSaving();
    try {
      const workflow = await this.saving;
      this.saving = null;
      this.savedVersion = version;
      this.onSaved(workflow, this.version === version);
      return true;
    } catch (error) {
      this.saving = null;
      this.onRefused(error, body);
      return false;
    }
  }
}

export function noProblems() {
  return { nodes: new Map(), edges: new Map(), other: [], fields: new Set() };
}

export function hasProblems(problems) {
  return Boolean(problems.nodes.size || problems.edges.size || problems.other.length);
}

// A refused save's problems, placed on the document it sent: a 400's details name `node:<id>`,
// `edge:<from>-><to>`, `nodes[i]`, `edges[i]`, `workflow` or a field (docs/api.md). nodes: id -> [message],
// edges: "from->to" -> [message], other: [message], fields: the document's fields named (as "name").
export function problemsFrom(error, body) {
  const problems = noProblems();
  const details = error?.status === 400 && error.details && typeof error.details === "object" ? error.details : null;
  if (!details || !Object.keys(details).length) {
    problems.other.push(errorText(error));
    return problems;
  }
  const add = (map, key, messages) => map.set(key, [...(map.get(key) || []), ...messages]);
  for (const [key, value] of Object.entries(details)) {
    const messages = (Array.isArray(value) ? value : [value]).map(String);
    const node = /^node:(.+)$/.exec(key);
    const edge = /^edge:(.+)$/.exec(key);
    const nodeAt = /^nodes\[(\d+)\]$/.exec(key);
    const edgeAt = /^edges\[(\d+)\]$/.exec(key);
    if (node) add(problems.nodes, node[1], messages);
    else if (edge) add(problems.edges, edge[1], messages);
    else if (nodeAt && body.nodes?.[nodeAt[1]]?.id) add(problems.nodes, body.nodes[nodeAt[1]].id, messages);
    else if (edgeAt && body.edges?.[edgeAt[1]]) {
      const { from, to } = body.edges[edgeAt[1]];
      add(problems.edges, `${from}->${to}`, messages);
    } else {
      problems.fields.add(key);
      problems.other.push(...messages.map((message) => (key === "workflow" ? message : `${key}: ${message}`)));
    }
  }
  return problems;
}

// The problems as a list under "The server refused the last save:"; a node's has a button that shows it.
export function problemItems(problems, { nameOf, showNode }) {
  const items = [];
  for (const [id, messages] of problems.nodes) {
    for (const message of messages) {
      items.push(h("li", {}, message, " ", h("button", { type: "button", class: "small",
        onclick: () => showNode(id) }, `Show ${nameOf(id)}`)));
    }
  }
  for (const [key, messages] of problems.edges) items.push(...messages.map((message) => h("li", {}, `Edge ${key}: ${message}`)));
  items.push(...problems.other.map((message) => h("li", {}, message)));
  return items;
}
