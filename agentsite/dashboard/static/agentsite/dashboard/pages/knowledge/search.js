// The knowledge search: POST /api/kb/search {query, collections, topK, mode} over the collections the page has
// ticked (`collections()`, a promise: the list may still be loading), showing each hit's document, collection,
// similarity and rank score.
import { errorBox, errorText, field, h, loading } from "../../ui.js";

const TOP_K = ["5", "10", "20", "50"];
// The labels of the search modes of POST /api/kb/search (docs/api.md, Search and context); which are offered
// comes from GET /api/kb/search (`dense` only with the dense model installed), the default first.
const MODE_LABELS = { hybrid: "Hybrid", lexical: "Words (BM25)", vector: "Similarity", dense: "Meaning (dense model)" };
const MODES = ["hybrid", "lexical", "vector"];

export class SearchBox {
  constructor({ ctx, collections }) {
    this.ctx = ctx;
    this.collections = collections;
    this.abort = null;
    this.stopped = false;
    this.element = this.render();
  }

  stop() {
    this.stopped = true;
    this.abort?.abort();
  }

  render() {
    const query = h("input", { type: "search", required: true, maxlength: "2000", autocomplete: "off" });
    const topK = h("select", {}, TOP_K.map((value) => h("option", { value }, value)));
    const mode = h("select", {}, MODES.map((value) => h("option", { value }, MODE_LABELS[value])));
    this.loadModes(mode);
    this.results = h("div", { class: "kb-results", "aria-live": "polite" });
    return h("form", { class: "card kb-search", role: "search", "aria-labelledby": "kb-search-title",
      onsubmit: (event) => { event.preventDefault(); this.search(query.value, Number(topK.value), mode.value); } },
    h("h2", { id: "kb-search-title" }, "Search"),
    h("div", { class: "kb-search-row" }, field("Search query", query), field("Mode", mode), field("Results", topK),
      h("button", { type: "submit", class: "primary" }, "Search")),
    h("p", { class: "muted kb-score-help" }, "Similarity: how alike the words of the passage and your query are "
      + "(cosine, up to 1). Rank: what the order follows (hybrid: both signals combined, up to 1.2; words: BM25)."),
    this.results);
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
    const collections = await this.collections();
    if (this.stopped) return;
    if (!collections.length) {
      this.results.replaceChildren(h("p", { class: "form-error", role: "alert" }, "Tick at least one collection to search."));
      return;
    }
    this.abort?.abort();
    const controller = new AbortController();
    this.abort = controller;
    this.results.replaceChildren(loading("Searching…"));
    const body = { query, topK, mode, collections: collections.map((item) => item.id) };
    let answer;
    try {
      answer = await this.ctx.api("/api/kb/search", { method: "POST", body, signal: controller.signal });
    } catch (error) {
      if (controller.signal.aborted || this.stopped) return;
      this.results.replaceChildren(errorBox(`The search failed: ${errorText(error)}`));
      return;
    }
    if (this.stopped || controller.signal.aborted) return;
    const results = answer.results || [];
    if (!results.length) {
      this.results.replaceChildren(h("p", { class: "empty" }, "Nothing matched. Try other words, or add documents."));
      return;
    }
    const where = ` in ${collections.length} collection${collections.length === 1 ? "" : "s"}`;
    this.results.replaceChildren(h("p", { class: "muted" }, `${results.length} best matches${where}, best first:`),
      h("ol", { class: "kb-hits" }, results.map((hit) => h("li", { class: "kb-hit" },
        h("div", { class: "kb-hit-head" },
          h("span", { class: "kb-hit-doc" }, hit.document?.filename || "document"),
          hit.collection ? h("span", { class: "kb-hit-collection", dataset: { collectionId: String(hit.collection.id) } },
            `in ${hit.collection.name}`) : null,
          h("span", { class: "muted" }, ` part ${Number(hit.chunk?.index ?? 0) + 1}`),
          h("meter", { min: "0", max: "1", value: String(Math.max(0, hit.score)), "aria-hidden": "true" }),
          h("span", { class: "kb-score" }, `similarity ${Number(hit.score).toFixed(3)}`),
          h("span", { class: "kb-rank muted" }, `rank ${Number(hit.rank_score).toFixed(3)}`)),
        h("p", { class: "kb-hit-text" }, hit.chunk?.text || "")))));
  }
}
