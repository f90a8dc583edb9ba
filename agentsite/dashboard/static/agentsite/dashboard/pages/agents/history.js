// The agent's versions (GET /api/agents/:id/versions, newest first): each save that changed something made
// one. "View" shows a version's fields (GET .../versions/:n) and, to those who may change the agent, "Restore"
// (POST .../versions/:n/restore), which makes a new version equal to it.
import { errorText, formatTime, h, put } from "../../ui.js";

// A field's label from its name: `max_tokens` -> "Max tokens" (the fields are the version's own, in its order).
function fieldLabel(name) {
  const words = name.replace(/_/g, " ");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

export class HistoryPanel {
  // editor: the AgentEditor (its ctx, path(), readOnly, agent, and restored(agent)).
  constructor(editor) {
    this.editor = editor;
    this.list = h("ol", { class: "agents-history-list" });
    this.detail = h("div", { class: "agents-history-detail", "aria-live": "polite" });
    this.element = h("section", { class: "card agents-history", "aria-labelledby": "agents-history-title" },
      h("h2", { id: "agents-history-title" }, "Version history"), this.list, this.detail);
  }

  async load() {
    try {
      const page = await this.editor.ctx.api(this.editor.path("/versions?limit=100"));
      put(this.list, page.results.map((version) => h("li", { dataset: { version: String(version.number) } },
        h("span", { class: "agents-version-name" }, `Version ${version.number}`),
        h("span", { class: "muted" }, ` ${version.note || "saved"} · ${version.author ? version.author.username : "the deployment"} · `,
          h("time", { datetime: version.created_at }, formatTime(version.created_at))),
        " ", h("button", { type: "button", class: "small", "aria-label": `View version ${version.number}`,
          onclick: () => this.show(version.number) }, "View"))));
    } catch (error) {
      put(this.list, h("li", {}, `The history could not be loaded: ${errorText(error)}`));
    }
  }

  async show(number) {
    let version;
    try {
      version = await this.editor.ctx.api(this.editor.path(`/versions/${number}`));
    } catch (error) {
      put(this.detail, h("p", { class: "form-error" }, `The version could not be loaded: ${errorText(error)}`));
      return;
    }
    const fields = version.agent || {};
    const value = (name) => {
      const item = fields[name];
      if (Array.isArray(item)) return item.length ? item.join(", ") : "none";
      if (name === "model" && !item) return "the deployment's default";
      return item === undefined || item === null || item === "" ? "—" : String(item);
    };
    const latest = this.editor.agent.version; // the agent's, which a save in flight may be ahead of the list by
    const canRestore = !this.editor.readOnly && number !== latest;
    put(this.detail,
      h("h3", {}, number === latest ? `Version ${number} (the latest)` : `Version ${number}`),
      h("dl", { class: "agents-version-fields" }, Object.keys(fields).map((name) => [h("dt", {}, fieldLabel(name)),
        h("dd", { class: name === "instructions" ? "agents-version-text" : null }, value(name))])),
      canRestore ? h("button", { type: "button", onclick: () => this.restore(number) }, `Restore version ${number}`) : null);
  }

  async restore(number) {
    try {
      const agent = await this.editor.ctx.api(this.editor.path(`/versions/${number}/restore`), { method: "POST" });
      this.editor.restored(agent);
      this.editor.ctx.toast(`Version ${number} restored as version ${agent.version}.`, "success");
      put(this.detail);
      await this.load();
    } catch (error) {
      this.editor.ctx.toast(`Could not restore: ${errorText(error)}`, "error");
    }
  }
}
