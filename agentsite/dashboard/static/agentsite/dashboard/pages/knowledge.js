// Knowledge, by collection: the collections the user may read (GET /api/kb/collections: their own, the
// personal one first, and those shared with them, each with its owner and the user's role), a form for a new
// one, and the chosen collection's documents (pages/knowledge/collection.js: add, delete, rename, share);
// a search across the collections ticked in the list (pages/knowledge/search.js).
import { listAll } from "../api.js";
import { errorBox, errorText, field, h, loading, pageHeader, put } from "../ui.js";
import { CollectionPanel } from "./knowledge/collection.js";
import { SearchBox } from "./knowledge/search.js";

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
    this.collections = [];
    this.ticked = new Set();
    this.chosen = null;
    this.panel = null;
  }

  stop() {
    this.stopped = true;
    this.search?.stop();
  }

  async start() {
    this.listBox = h("section", { class: "card kb-collections", "aria-labelledby": "kb-collections-title" });
    this.panelBox = h("div", { class: "kb-panel" });
    this.search = new SearchBox({ ctx: this.ctx, collections: () => this.searched() });
    const side = h("div", { class: "kb-side" }, this.listBox, this.createForm());
    put(this.root,
      pageHeader("Knowledge", "Documents the assistant may quote from when it answers, in collections you keep "
        + "to yourself or share."),
      h("div", { class: "kb-layout" }, side, h("div", { class: "kb-main" }, this.search.element, this.panelBox)));
    this.listed = this.load();
    await this.listed;
  }

  // The collections the search covers: the ticked ones, once the list has come (a search sent at once waits).
  async searched() {
    await this.listed;
    return this.collections.filter((item) => this.ticked.has(item.id));
  }

  async load(chooseId) {
    put(this.listBox, h("h2", { id: "kb-collections-title" }, "Collections"), loading("Loading collections…"));
    let collections;
    try {
      collections = await listAll("/api/kb/collections?limit=200", { max: 5000 });
    } catch (error) {
      if (this.stopped) return;
      put(this.listBox, h("h2", { id: "kb-collections-title" }, "Collections"),
        errorBox(`The collections could not be loaded: ${errorText(error)}`, () => this.load(chooseId)));
      return;
    }
    if (this.stopped) return;
    const known = new Set(this.collections?.map((item) => item.id) || []);
    // New collections (and, the first time, every one) are ticked for the search.
    for (const item of collections) if (!known.has(item.id)) this.ticked.add(item.id);
    this.collections = collections;
    const wanted = chooseId ?? this.chosen?.id;
    // null: the personal collection before it exists (the server makes it with its first document).
    this.chosen = collections.find((item) => item.id === wanted) || collections.find((item) => item.personal) || null;
    this.renderList();
    this.showChosen();
  }

  renderList() {
    const title = h("h2", { id: "kb-collections-title" }, "Collections");
    const personal = this.collections.some((item) => item.personal) ? null : h("li", { class: "kb-collection-item" },
      h("div", { class: "kb-collection-text" },
        h("button", { type: "button", class: "link kb-collection-open", "aria-current": this.chosen ? null : "true",
          onclick: () => this.choose(null) }, "Your documents"),
        h("small", { class: "muted" }, "personal · empty")));
    put(this.listBox, title, h("p", { class: "muted kb-collections-help" }, "Ticked collections are searched."),
      h("ul", { class: "kb-collection-items" }, personal, this.collections.map((item) => this.listItem(item))));
  }

  choose(item) {
    this.chosen = item;
    this.renderList();
    this.showChosen();
  }

  listItem(item) {
    const tick = h("input", { type: "checkbox", checked: this.ticked.has(item.id), "aria-label": `Search ${item.name}`,
      onchange: (event) => {
        if (event.currentTarget.checked) this.ticked.add(item.id);
        else this.ticked.delete(item.id);
      } });
    const mine = String(item.owner?.id) === String(this.ctx.user?.id); // /api/auth/me answers the id as a string
    return h("li", { class: "kb-collection-item", dataset: { collectionId: String(item.id) } },
      tick,
      h("div", { class: "kb-collection-text" },
        h("button", { type: "button", class: "link kb-collection-open", "aria-current": item === this.chosen ? "true" : null,
          title: item.name, onclick: () => this.choose(item) }, item.name),
        h("small", { class: "muted" }, item.personal ? "personal" : null, item.personal ? " · " : null,
          `${item.documents} document${item.documents === 1 ? "" : "s"}`,
          mine ? null : ` · ${item.role} · owner ${item.owner?.username ?? "?"}`,
          mine && item.access?.visibility && item.access.visibility !== "private"
            ? ` · shared (${item.access.visibility === "everyone" ? "everyone" : item.access.grants_count})` : null)));
  }

  showChosen() {
    this.panel = new CollectionPanel({ ctx: this.ctx, collection: this.chosen, implicit: !this.chosen,
      onChange: (chooseId) => this.load(chooseId) });
    put(this.panelBox, this.panel.element);
    this.panel.load();
  }

  createForm() {
    const name = h("input", { required: true, maxlength: "100", autocomplete: "off", spellcheck: "false" });
    const description = h("textarea", { rows: "2", maxlength: "2000" });
    const problem = h("div", { class: "form-error", role: "alert" });
    const form = h("form", { class: "card", "aria-labelledby": "kb-create-title", novalidate: true,
      onsubmit: async (event) => {
        event.preventDefault();
        problem.textContent = "";
        if (!name.value.trim()) {
          problem.textContent = "Give the collection a name.";
          name.focus();
          return;
        }
        try {
          const made = await this.ctx.api("/api/kb/collections", { method: "POST",
            body: { name: name.value.trim(), description: description.value } });
          this.ctx.toast(`Collection ${made.name} created.`, "success");
          form.reset();
          await this.load(made.id);
        } catch (error) {
          problem.textContent = errorText(error);
          name.focus();
        }
      } },
    h("h2", { id: "kb-create-title" }, "New collection"),
    field("Collection name", name),
    field("Description", description),
    problem, h("button", { type: "submit", class: "primary" }, "Create collection"));
    return form;
  }
}
