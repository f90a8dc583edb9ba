// One knowledge collection: its name, owner and the reader's role, its documents (GET /api/kb/documents?collection=),
// and what the role allows: an editor adds documents (upload or pasted text, sent with `collection`) and
// deletes them; the owner (or an admin) also renames, shares (ctx.share, the shell's dialog) and deletes the
// collection; a viewer only reads. `implicit` (no `collection`): the user's personal collection before it exists
// (the server makes it with its first document); documents go without a collection, to it.
import { listAll } from "../../api.js";
import { confirmDialog, errorBox, errorText, field, formatSize, formatTime, h, labelCells, loading, put } from "../../ui.js";

const ACCEPT = ".txt,.md,.markdown,.html,.htm,.pdf,text/plain,text/markdown,text/html,application/pdf";
const WRITERS = new Set(["owner", "editor"]);

export class CollectionPanel {
  constructor({ ctx, collection, implicit, onChange }) {
    this.ctx = ctx;
    this.collection = collection;
    this.implicit = implicit;
    this.onChange = onChange;
    this.canEdit = implicit || WRITERS.has(collection?.role);
    this.owns = !implicit && collection?.role === "owner";
    this.docsBox = h("div", { class: "kb-docs" }, loading("Loading documents…"));
    this.element = this.render();
  }

  render() {
    const item = this.collection;
    const mine = this.implicit || String(item.owner?.id) === String(this.ctx.user?.id);
    this.clearButton = h("button", { type: "button", class: "danger small", hidden: true, onclick: () => this.clearAll() },
      "Delete all documents");
    return h("section", { class: "card kb-collection", "aria-labelledby": "kb-docs-title",
      dataset: { collectionId: item ? String(item.id) : "" } },
    h("div", { class: "kb-docs-head" },
      h("h2", { id: "kb-docs-title", class: "kb-collection-name" }, item ? item.name : "Your documents"),
      item ? h("span", { class: "badge" }, item.role) : null,
      this.owns ? this.ownerActions() : null,
      this.implicit || (this.owns && item.personal) ? this.clearButton : null),
    item?.description ? h("p", { class: "kb-collection-description" }, item.description) : null,
    mine ? null : h("p", { class: "muted kb-owner" }, `Shared with you by ${item.owner?.username ?? "?"}`,
      item.role === "viewer" ? ": you may read and search it." : ": you may add and delete its documents."),
    this.canEdit ? h("div", { class: "kb-add" }, this.uploadForm(), this.pasteForm()) : null,
    this.docsBox);
  }

  path() {
    return `/api/kb/collections/${encodeURIComponent(this.collection.id)}`;
  }

  ownerActions() {
    const item = this.collection;
    return h("div", { class: "actions" },
      h("button", { type: "button", class: "small", onclick: () => this.ctx.share({ kind: "collection", path: this.path(), label: item.name,
        onChange: () => this.onChange(item.id) }) }, "Share"),
      h("button", { type: "button", class: "small", onclick: () => this.rename() }, "Rename"),
      item.personal ? null : h("button", { type: "button", class: "small danger", "aria-label": `Delete the collection ${item.name}`,
        onclick: () => this.removeCollection() }, "Delete collection"));
  }

  rename() {
    const item = this.collection;
    if (this.element.querySelector(".kb-rename")) return;
    const name = h("input", { value: item.name, maxlength: "100", autocomplete: "off", spellcheck: "false" });
    const description = h("textarea", { rows: "2", maxlength: "2000", value: item.description || "" });
    const problem = h("div", { class: "form-error", role: "alert" });
    const form = h("form", { class: "kb-rename", novalidate: true, "aria-label": "Rename the collection",
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          await this.ctx.api(this.path(), { method: "PATCH", body: { name: name.value.trim(), description: description.value } });
          this.ctx.toast("Collection saved.", "success");
          this.onChange(item.id);
        } catch (error) {
          problem.textContent = errorText(error);
        }
      } },
    field("New name", name), field("Description", description), problem,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Save"),
      h("button", { type: "button", onclick: () => form.remove() }, "Cancel")));
    this.element.querySelector(".kb-docs-head").after(form);
    name.focus();
  }

  async removeCollection() {
    const item = this.collection;
    if (!(await confirmDialog(`Delete the collection ${item.name} and its ${item.documents} documents?`,
      { confirmLabel: "Delete" }))) return;
    try {
      await this.ctx.api(this.path(), { method: "DELETE" });
      this.ctx.toast(`Collection ${item.name} deleted.`, "success");
      this.onChange(null);
    } catch (error) {
      this.ctx.toast(`The collection was not deleted: ${errorText(error)}`, "error");
    }
  }

  // --- adding ---

  uploadForm() {
    const file = h("input", { type: "file", accept: ACCEPT, required: true });
    const problem = h("div", { class: "form-error", role: "alert" });
    const button = h("button", { type: "submit", class: "primary" }, "Upload");
    const form = h("form", { class: "kb-add-form", novalidate: true, "aria-labelledby": "kb-upload-title", onsubmit: async (event) => {
      event.preventDefault();
      problem.textContent = "";
      const chosen = file.files?.[0];
      if (!chosen) {
        problem.textContent = "Choose a file first.";
        file.focus();
        return;
      }
      const body = new FormData();
      body.append("file", chosen, chosen.name);
      if (this.collection) body.append("collection", String(this.collection.id));
      await this.add(body, button, problem, chosen.name);
      if (!problem.textContent) form.reset();
    } },
    h("h3", { id: "kb-upload-title" }, "Upload a file"),
    field("File", file, "Text, Markdown, HTML or PDF, up to 10 MB."),
    problem, button);
    return form;
  }

  pasteForm() {
    const name = h("input", { maxlength: "255", required: true, placeholder: "notes.md", spellcheck: "false" });
    const text = h("textarea", { rows: "5", required: true });
    const problem = h("div", { class: "form-error", role: "alert" });
    const button = h("button", { type: "submit", class: "primary" }, "Add text");
    const form = h("form", { class: "kb-add-form", novalidate: true, "aria-labelledby": "kb-paste-title", onsubmit: async (event) => {
      event.preventDefault();
      problem.textContent = "";
      if (!name.value.trim() || !text.value.trim()) {
        problem.textContent = "Give the document a name and some text.";
        (name.value.trim() ? text : name).focus();
        return;
      }
      const filename = name.value.trim();
      const body = { filename, content: text.value };
      if (/\.(md|markdown)$/i.test(filename)) body.content_type = "text/markdown";
      if (this.collection) body.collection = this.collection.id;
      await this.add(body, button, problem, filename);
      if (!problem.textContent) form.reset();
    } },
    h("h3", { id: "kb-paste-title" }, "Paste text"),
    field("Document name", name),
    field("Text", text),
    problem, button);
    return form;
  }

  async add(body, button, problem, label) {
    button.disabled = true;
    const idle = button.textContent;
    button.textContent = "Adding…";
    try {
      const document = await this.ctx.api("/api/kb/documents", { method: "POST", body });
      this.ctx.toast(`${document.filename} added (${document.chunks} chunks).`, "success");
      this.onChange(this.collection?.id);
    } catch (error) {
      problem.textContent = `${label} was not added: ${errorText(error)}`;
    } finally {
      button.disabled = false;
      button.textContent = idle;
    }
  }

  // --- the documents ---

  async load() {
    const query = this.collection ? `&collection=${encodeURIComponent(this.collection.id)}` : "";
    let documents;
    try {
      documents = await listAll(`/api/kb/documents?limit=200${query}`, { max: 5000 });
    } catch (error) {
      put(this.docsBox, errorBox(`The documents could not be loaded: ${error.message}`, () => this.load()));
      return;
    }
    this.documents = documents;
    this.clearButton.hidden = !documents.length;
    if (!documents.length) {
      put(this.docsBox, h("p", { class: "empty" }, this.canEdit ? "No documents yet: upload a file or paste some text."
        : "No documents in this collection yet."));
      return;
    }
    const table = h("table", { class: "kb-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Name"), h("th", { scope: "col", class: "num" }, "Chunks"),
        h("th", { scope: "col", class: "num" }, "Size"), h("th", { scope: "col" }, "Added"),
        this.canEdit ? h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")) : null)),
      h("tbody", {}, documents.map((document) => h("tr", { "data-document-id": document.id },
        h("th", { scope: "row" }, document.filename),
        h("td", { class: "num" }, String(document.chunks)),
        h("td", { class: "num" }, formatSize(document.size)),
        h("td", {}, h("time", { datetime: document.created_at }, formatTime(document.created_at))),
        this.canEdit ? h("td", {}, h("button", { type: "button", class: "small danger", "aria-label": `Delete ${document.filename}`,
          onclick: () => this.remove(document) }, "Delete")) : null))));
    labelCells(table);
    put(this.docsBox, h("div", { class: "table-wrap" }, table));
  }

  async remove(document) {
    if (!(await confirmDialog(`Delete ${document.filename} from the knowledge base?`, { confirmLabel: "Delete" }))) return;
    try {
      await this.ctx.api(`/api/kb/documents/${encodeURIComponent(document.id)}`, { method: "DELETE" });
      this.ctx.toast(`${document.filename} deleted.`, "success");
    } catch (error) {
      this.ctx.toast(`${document.filename} could not be deleted: ${error.message}`, "error");
    }
    this.onChange(this.collection?.id);
  }

  async clearAll() {
    const count = this.documents?.length ?? 0;
    if (!(await confirmDialog(`Delete all ${count} documents? This cannot be undone.`, { confirmLabel: "Delete all" }))) return;
    try {
      await this.ctx.api("/api/kb/clear", { method: "DELETE" });
      this.ctx.toast("All documents deleted.", "success");
    } catch (error) {
      this.ctx.toast(`The documents could not be deleted: ${error.message}`, "error");
    }
    this.onChange(this.collection?.id);
  }
}
