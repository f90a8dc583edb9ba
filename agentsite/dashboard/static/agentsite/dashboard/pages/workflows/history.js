// The workflow's versions (GET /api/workflows/:id/versions): each save makes one. Choosing one shows how it
// differs from the latest (nodes added, removed or changed; edges added or removed) and offers to restore it,
// which makes a new version equal to it (POST …/versions/:n/restore).
import { errorText, h, put } from "../../ui.js";

// What changed from `older` to `newer` (two versions' {nodes, edges}), as lines of text.
export function versionDiff(older, newer) {
  const byId = (nodes) => new Map(nodes.map((node) => [node.id, node]));
  const before = byId(older.nodes);
  const after = byId(newer.nodes);
  const lines = [];
  for (const [id, node] of after) {
    if (!before.has(id)) lines.push({ kind: "added", text: `node ${node.name} (${node.type}) added` });
  }
  for (const [id, node] of before) {
    const now = after.get(id);
    if (!now) lines.push({ kind: "removed", text: `node ${node.name} (${node.type}) removed` });
    else if (JSON.stringify([node.name, node.type, node.config]) !== JSON.stringify([now.name, now.type, now.config])) {
      lines.push({ kind: "changed", text: `node ${node.name === now.name ? node.name : `${node.name} → ${now.name}`} changed` });
    }
  }
  const edgeKey = (edge) => `${edge.from} → ${edge.to}`;
  const edgesBefore = new Set(older.edges.map(edgeKey));
  const edgesAfter = new Set(newer.edges.map(edgeKey));
  for (const key of edgesAfter) if (!edgesBefore.has(key)) lines.push({ kind: "added", text: `edge ${key} added` });
  for (const key of edgesBefore) if (!edgesAfter.has(key)) lines.push({ kind: "removed", text: `edge ${key} removed` });
  return lines;
}

export class HistoryPanel {
  // editor: the WorkflowEditor (its ctx, id, and `restored(workflow)` to show the restored graph).
  constructor(editor) {
    this.editor = editor;
    this.list = h("ol", { class: "wf-history-list" });
    this.detail = h("div", { class: "wf-history-detail", "aria-live": "polite" });
    this.element = h("details", { class: "wf-history", ontoggle: () => { if (this.element.open) this.load(); } },
      h("summary", {}, "History"), this.list, this.detail);
  }

  path(suffix = "") {
    return `/api/workflows/${encodeURIComponent(this.editor.id)}/versions${suffix}`;
  }

  async load() {
    try {
      const page = await this.editor.ctx.api(this.path());
      this.latest = page.results[0]?.number;
      put(this.list, page.results.map((version) => h("li", {},
        h("button", { type: "button", class: "link", onclick: () => this.show(version.number) },
          `Version ${version.number}`), ` — ${version.note || "saved"}, ${new Date(version.created_at).toLocaleString()}`)));
      put(this.detail);
    } catch (error) {
      put(this.list, h("li", {}, `The history could not be loaded: ${errorText(error)}`));
    }
  }

  async show(number) {
    try {
      const [chosen, latest] = await Promise.all([this.editor.ctx.api(this.path(`/${number}`)),
        this.editor.ctx.api(this.path(`/${this.latest}`))]);
      const lines = versionDiff(chosen, latest);
      put(this.detail,
        h("h4", {}, number === this.latest ? `Version ${number} (the latest)` : `From version ${number} to the latest (${this.latest})`),
        lines.length ? h("ul", { class: "wf-diff" }, lines.map((line) => h("li", { class: `wf-diff-${line.kind}` }, line.text)))
          : h("p", { class: "muted" }, "The same nodes and edges."),
        number === this.latest ? null
          : h("button", { type: "button", onclick: () => this.restore(number) }, `Restore version ${number}`));
    } catch (error) {
      put(this.detail, h("p", {}, `The version could not be loaded: ${errorText(error)}`));
    }
  }

  async restore(number) {
    try {
      const workflow = await this.editor.ctx.api(this.path(`/${number}/restore`), { method: "POST" });
      this.editor.restored(workflow);
      this.editor.ctx.toast(`Version ${number} restored as version ${workflow.version}.`, "success");
      await this.load();
    } catch (error) {
      this.editor.ctx.toast(`Could not restore: ${errorText(error)}`, "error");
    }
  }
}
