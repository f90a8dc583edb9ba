// Knowledge: the user's documents (listed, added by upload or pasted text, deleted one by one or all),
// and a search over their chunks in a chosen mode that shows each hit's similarity and rank score.
import { listAll } from "../api.js";
import { confirmDialog, errorBox, field, formatSize, formatTime, h, loading } from "../ui.js";

const ACCEPT = ".txt,.md,.markdown,.html,.htm,.pdf,text/plain,text/markdown,text/html,application/pdf";
const TOP_K = ["5", "10", "20", "50"];
// The labels of the search modes of POST /api/kb/search (docs/api.md, Search and context); which are offered
// comes from GET /api/kb/search (`dense` only with the dense model installed), the default first.
const MODE_LABELS = { hybrid: "Hybrid", lexical: "Words (BM25)", vector: "Similarity", dense: "Meaning (dense model)" };
const MODES = ["hybrid", "lexical", "vector"];

export async function mount(root, ctx) {
  const page = new KnowledgePage(root, ctx);
  await page.start();
  return () => page.stop();
}

class KnowledgePage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.stopped = false;
    this.searchAbort = null;
    this.documents = [];
  }

  stop() {
    this.stopped = true;
    this.searchAbort?.abort();
  }

  async start() {
    this.render();
    await this.loadDocuments();
  }

  render() {
    this.docsBox = h("div", { class: "kb-docs" }, loading("Loading documents…"));
    this.clearButton = h("button", { type: "button", class: "danger small", hidden: true, onclick: () => this.clearAll() },
      "Delete all documents");
    this.root.replaceChildren(
      h("header", { class: "page-header" }, h("h1", {}, "Knowledge"),
        h("p", { class: "summary" }, "Documents the assistant may quote from when it answers you. Only you can see yours.")),
      h("div", { class: "kb-layout" },
        h("div", { class: "kb-side" }, this.uploadForm(), this.pasteForm()),
        h("div", { class: "kb-main" }, this.searchForm(),
          h("section", { class: "card", "aria-labelledby": "kb-docs-title" },
            h("div", { class: "kb-docs-head" }, h("h2", { id: "kb-docs-title" }, "Documents"), this.clearButton),
            this.docsBox))));
  }

  // --- adding ---

  uploadForm() {
    const file = h("input", { type: "file", accept: ACCEPT, required: true });
    const problem = h("div", { class: "form-error", role: "alert" });
    const button = h("button", { type: "submit", class: "primary" }, "Upload");
    const form = h("form", { class: "card", novalidate: true, "aria-labelledby": "kb-upload-title", onsubmit: async (event) => {
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
      await this.add(body, button, problem, chosen.name);
      if (!problem.textContent) form.reset();
    } },
    h("h2", { id: "kb-upload-title" }, "Upload a file"),
    field("File", file, "Text, Markdown, HTML or PDF, up to 10 MB."),
    problem, button);
    return form;
  }

  pasteForm() {
    const name = h("input", { maxlength: "255", required: true, placeholder: "notes.md", spellcheck: "false" });
    const text = h("textarea", { rows: "8", required: true });
    const problem = h("div", { class: "form-error", role: "alert" });
    const button = h("button", { type: "submit", class: "primary" }, "Add text");
    const form = h("form", { class: "card", novalidate: true, "aria-labelledby": "kb-paste-title", onsubmit: async (event) => {
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
      await this.add(body, button, problem, filename);
      if (!problem.textContent) form.reset();
    } },
    h("h2", { id: "kb-paste-title" }, "Paste text"),
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
      await this.loadDocuments();
    } catch (error) {
      problem.textContent = `${label} was not added: ${describe(error)}`;
    } finally {
      button.disabled = false;
      button.textContent = idle;
    }
  }

  // --- the list ---

  async loadDocuments() {
    try {
      this.documents = await listAll("/api/kb/documents?limit=200", { max: 5000 });
    } catch (error) {
      if (!this.stopped) {
        this.docsBox.replaceChildren(errorBox(`The documents could not be loaded: ${error.message}`, () => this.loadDocuments()));
      }
      return;
    }
    if (this.stopped) return;
    this.clearButton.hidden = !this.documents.length;
    if (!this.documents.length) {
      this.docsBox.replaceChildren(h("p", { class: "empty" }, "No documents yet: upload a file or paste some text."));
      return;
    }
    const rows = this.documents.map((document) => h("tr", { "data-document-id": document.id },
      h("th", { scope: "row" }, document.filename),
      h("td", { class: "num" }, String(document.chunks)),
      h("td", { class: "num" }, formatSize(document.size)),
      h("td", {}, h("time", { datetime: document.created_at }, formatTime(document.created_at))),
      h("td", {}, h("button", { type: "button", class: "small danger", "aria-label": `Delete ${document.filename}`,
        onclick: () => this.remove(document) }, "Delete"))));
    this.docsBox.replaceChildren(h("div", { class: "table-wrap" }, h("table", { class: "kb-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Name"), h("th", { scope: "col", class: "num" }, "Chunks"),
        h("th", { scope: "col", class: "num" }, "Size"), h("th", { scope: "col" }, "Added"),
        h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")))),
      h("tbody", {}, rows))));
  }

  async remove(document) {
    if (!(await confirmDialog(`Delete ${document.filename} from the knowledge base?`, { confirmLabel: "Delete" }))) return;
    try {
      await this.ctx.api(`/api/kb/documents/${encodeURIComponent(document.id)}`, { method: "DELETE" });
      this.ctx.toast(`${document.filename} deleted.`, "success");
    } catch (error) {
      this.ctx.toast(`${document.filename} could not be deleted: ${error.message}`, "error");
    }
    await this.loadDocuments();
    this.root.querySelector(".kb-docs button, .kb-side input")?.focus();
  }

  async clearAll() {
    const count = this.documents.length;
    if (!(await confirmDialog(`Delete all ${count} documents? This cannot be undone.`, { confirmLabel: "Delete all" }))) return;
    try {
      await this.ctx.api("/api/kb/clear", { method: "DELETE" });
      this.ctx.toast("All documents deleted.", "success");
    } catch (error) {
      this.ctx.toast(`The documents could not be deleted: ${error.message}`, "error");
    }
    await this.loadDocuments();
  }

  // --- search ---

  searchForm() {
    const query = h("input", { type: "search", required: true, maxlength: "2000", autocomplete: "off" });
    const topK = h("select", {}, TOP_K.map((value) => h("option", { value }, value)));
    const mode = h("select", {}, MODES.map((value) => h("option", { value }, MODE_LABELS[value])));
    this.loadModes(mode);
    this.results = h("div", { class: "kb-results", "aria-live": "polite" });
    const form = h("form", { class: "card kb-search", role: "search", "aria-labelledby": "kb-search-title",
      onsubmit: (event) => { event.preventDefault(); this.search(query.value, Number(topK.value), mode.value); } },
    h("h2", { id: "kb-search-title" }, "Search"),
    h("div", { class: "kb-search-row" }, field("Search query", query), field("Mode", mode), field("Results", topK),
      h("button", { type: "submit", class: "primary" }, "Search")),
    h("p", { class: "muted kb-score-help" }, "Similarity: how alike the words of the passage and your query are "
      + "(cosine, up to 1). Rank: what the order follows (hybrid: both signals combined, up to 1.2; words: BM25)."),
    this.results);
    return form;
  }

  // The modes this server offers: adds `dense` when the model is installed; the three above if the ask fails.
  async loadModes(select) {
    try {
      const answer = await this.ctx.api("/api/kb/search");
      const modes = answer.modes.filter((value) => value in MODE_LABELS);
      if (modes.join() === MODES.join()) return;
      select.replaceChildren(...modes.map((value) => h("option", { value }, MODE_LABELS[value])));
    } catch {
      // keep the default modes
    }
  }

  async search(query, topK, mode) {
    if (!query.trim()) {
      this.results.replaceChildren(h("p", { class: "form-error", role: "alert" }, "Type something to search for."));
      return;
    }
    this.searchAbort?.abort();
    const controller = new AbortController();
    this.searchAbort = controller;
    this.results.replaceChildren(loading("Searching…"));
    let answer;
    try {
      answer = await this.ctx.api("/api/kb/search", { method: "POST", body: { query, topK, mode }, signal: controller.signal });
    } catch (error) {
      if (controller.signal.aborted || this.stopped) return;
      this.results.replaceChildren(errorBox(`The search failed: ${describe(error)}`));
      return;
    }
    if (this.stopped || controller.signal.aborted) return;
    const results = answer.results || [];
    if (!results.length) {
      this.results.replaceChildren(h("p", { class: "empty" }, "Nothing matched. Try other words, or add documents."));
      return;
    }
    this.results.replaceChildren(h("p", { class: "muted" }, `${results.length} best matches, best first:`),
      h("ol", { class: "kb-hits" }, results.map((hit) => h("li", { class: "kb-hit" },
        h("div", { class: "kb-hit-head" },
          h("span", { class: "kb-hit-doc" }, hit.document?.filename || "document"),
          h("span", { class: "muted" }, ` part ${Number(hit.chunk?.index ?? 0) + 1}`),
          h("meter", { min: "0", max: "1", value: String(Math.max(0, hit.score)), "aria-hidden": "true" }),
          h("span", { class: "kb-score" }, `similarity ${Number(hit.score).toFixed(3)}`),
          h("span", { class: "kb-rank muted" }, `rank ${Number(hit.rank_score).toFixed(3)}`)),
        h("p", { class: "kb-hit-text" }, hit.chunk?.text || "")))));
  }
}

function describe(error) {
  const fields = error?.details && typeof error.details === "object" && !Array.isArray(error.details)
    ? Object.values(error.details).flat().filter((item) => typeof item === "string") : [];
  return fields.length ? `${error.message} (${fields.join(" ")})` : error?.message || String(error);
}
