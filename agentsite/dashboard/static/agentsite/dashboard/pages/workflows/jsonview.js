// The editor's JSON view: the whole document as text, applied to the workflow on "Apply JSON" (an export
// file may be pasted as it is) and put back as saved on "Revert JSON".
import { errorText, field, h, hint } from "../../ui.js";
import { DOC_KEYS, drawable } from "./document.js";
import { arrange, overlapping } from "./graph.js";

// It reads editor.doc and changes the document through editor.replace(doc) (the editor draws and saves it;
// resolves true when saved) or, for a document the graph cannot draw, editor.adoptSaved(workflow).
export class JsonView {
  constructor(editor) {
    this.editor = editor;
    this.text = h("textarea", { class: "mono wf-json", rows: "24", spellcheck: "false", name: "workflowJson" });
    this.error = h("div", { class: "form-error", role: "alert", hidden: true });
    this.element = h("div", { id: "wf-view-json", role: "tabpanel", "aria-labelledby": "wf-tab-json", class: "wf-view", hidden: true },
      field("Workflow JSON", this.text, hint("name, description, nodes and edges; applied to the workflow on save.")),
      this.error,
      h("div", { class: "actions" },
        h("button", { type: "button", class: "primary", onclick: () => this.apply() }, "Apply JSON"),
        h("button", { type: "button", onclick: () => this.fill() }, "Revert JSON")));
  }

  fill() {
    this.text.value = JSON.stringify(this.editor.doc, null, 2);
    this.error.hidden = true;
  }

  showError(message) {
    this.error.textContent = message;
    this.error.hidden = false;
  }

  // The document the text describes, or null after saying what is wrong with it.
  proposed() {
    let parsed;
    try {
      parsed = JSON.parse(this.text.value);
    } catch (error) {
      this.showError(`Not valid JSON: ${error.message}`);
      return null;
    }
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) {
      this.showError("Give a JSON object with name, description, nodes and edges.");
      return null;
    }
    // An export document may be pasted as is: its format and version say what it is, nothing to apply.
    const unknown = Object.keys(parsed).filter((key) => !DOC_KEYS.includes(key) && key !== "format" && key !== "version");
    if (unknown.length) {
      this.showError(`Unknown keys: ${unknown.join(", ")}. Only ${DOC_KEYS.join(", ")} are applied.`);
      return null;
    }
    const proposed = { ...this.editor.doc };
    for (const key of DOC_KEYS) if (key in parsed) proposed[key] = parsed[key];
    return proposed;
  }

  async apply() {
    this.error.hidden = true;
    const proposed = this.proposed();
    if (!proposed) return;
    if (!drawable(proposed)) {
      await this.applyUndrawable(proposed);
      return;
    }
    proposed.nodes = proposed.nodes.map((node) => ({ config: {}, ...node, position: node.position || { x: 0, y: 0 } }));
    if (await this.editor.replace(overlapping(proposed) ? { ...proposed, nodes: arrange(proposed).nodes } : proposed)) {
      this.fill();
      this.editor.ctx.toast("JSON applied and saved.", "success");
    } else {
      this.showError("Applied to the editor, but the server refused it: see the problems above; the nodes named are marked in the graph.");
    }
  }

  // Not something the graph can draw: let the server say what is wrong, without adopting it.
  async applyUndrawable(proposed) {
    const { ctx, id } = this.editor;
    try {
      const workflow = await ctx.api(`/api/workflows/${encodeURIComponent(id)}`, { method: "PATCH", body: proposed });
      this.editor.adoptSaved(workflow);
      this.fill();
      ctx.toast("JSON applied and saved.", "success");
    } catch (error) {
      this.showError(`Not applied: ${errorText(error)}`);
    }
  }
}
