// Settings, admins only: the model aliases (/api/aliases). An alias is a name for an ordered list of catalogue
// entries (`<connection>/<model>`, from GET /api/models) with a strategy: fallback (try in order; the next
// one answers when one fails before its first token) or balance (spread by weight). Listed, added, edited
// (targets added, reordered, weighted, removed) and deleted here.
import { confirmDialog, errorBox, errorText, field, fieldErrors, h, loading, put } from "../../ui.js";

const STRATEGIES = [["fallback", "Fallback: try in order"], ["balance", "Balance: weighted round-robin"],
  ["least_in_flight", "Balance: least in flight"]];

export class AliasesSection {
  constructor({ ctx }) {
    this.ctx = ctx;
    this.aliases = [];
    this.entries = []; // catalogue entries (kind "model") a target may name
    this.editing = null;
    this.list = h("ul", { class: "alias-list", "aria-label": "Aliases" });
    this.formBox = h("div", { class: "alias-form-box" });
    this.element = h("section", { class: "card settings-aliases", "aria-labelledby": "settings-aliases-title" },
      h("h2", { id: "settings-aliases-title" }, "Model aliases"),
      h("p", { class: "muted" }, "A name for several models: chats, workflows and /v1 may use it like a model."),
      this.list, this.formBox);
  }

  async load() {
    put(this.list, h("li", {}, loading("Loading the aliases…")));
    try {
      const [aliases, catalogue] = await Promise.all([this.ctx.api("/api/aliases"), this.ctx.api("/api/models")]);
      this.aliases = aliases;
      this.entries = catalogue.models.filter((entry) => entry.kind === "model" && entry.model);
    } catch (error) {
      put(this.list, h("li", {}, errorBox(`The aliases could not be loaded: ${errorText(error)}`, () => this.load())));
      return;
    }
    this.render();
    // The form keeps what is being typed; a fresh catalogue only changes the choices of a new form.
    if (!this.formBox.firstChild || !this.editing) this.showForm(this.editing);
  }

  render() {
    put(this.list, this.aliases.length ? this.aliases.map((alias) => this.item(alias))
      : h("li", { class: "empty" }, "No alias yet."));
  }

  item(alias) {
    const weighted = alias.strategy !== "fallback";
    return h("li", { class: "card alias", "aria-label": `Alias ${alias.name}` },
      h("div", { class: "conn-head" }, h("h3", {}, alias.name), h("span", { class: "badge" }, alias.strategy.replaceAll("_", " "))),
      h("ol", { class: "alias-targets" }, alias.targets.map((target) => h("li", {}, target.model,
        weighted ? h("span", { class: "muted" }, ` (weight ${target.weight ?? 1})`) : null))),
      h("div", { class: "actions" },
        h("button", { type: "button", onclick: () => this.showForm(alias) }, "Edit"),
        h("button", { type: "button", class: "danger", onclick: () => this.remove(alias) }, "Delete")));
  }

  async remove(alias) {
    if (!await confirmDialog(`Delete the alias ${alias.name}? Chats, workflows and tasks that name it stop working.`, { confirmLabel: "Delete" })) return;
    try {
      await this.ctx.api(`/api/aliases/${alias.id}`, { method: "DELETE" });
      this.aliases = this.aliases.filter((item) => item.id !== alias.id);
      if (this.editing?.id === alias.id) this.showForm(null);
      this.render();
      this.ctx.toast(`Alias ${alias.name} deleted.`, "success");
    } catch (error) {
      this.ctx.toast(`Not deleted: ${errorText(error)}`, "error");
    }
  }

  // --- the form ----------------------------------------------------------------------------------------

  showForm(alias) {
    this.editing = alias;
    const titleId = alias ? "alias-form-title-edit" : "alias-form-title-new";
    const error = h("div", { class: "form-error", role: "alert", hidden: true });
    const name = h("input", { type: "text", name: "name", autocomplete: "off", spellcheck: "false", required: true });
    name.value = alias?.name ?? "";
    const strategy = h("select", { name: "strategy" }, STRATEGIES.map(([value, label]) => h("option", { value }, label)));
    strategy.value = alias?.strategy ?? "fallback";
    this.rows = h("ol", { class: "alias-target-rows", "aria-label": "Targets" });
    for (const target of alias?.targets ?? []) this.addRow(target);
    if (!alias) this.addRow({});
    const form = h("form", { class: "alias-form", novalidate: true, "aria-labelledby": titleId,
      onsubmit: (event) => { event.preventDefault(); this.submit(form, error); } },
    h("h3", { id: titleId }, alias ? `Edit alias ${alias.name}` : "New alias"),
    field("Alias name", name, "Lowercase letters, digits, _ . : and - (no /), e.g. smart."),
    field("Strategy", strategy),
    h("fieldset", { class: "alias-targets-field" }, h("legend", {}, "Targets, in order"), this.rows,
      h("button", { type: "button", onclick: () => this.addRow({}).querySelector("select").focus() }, "Add target")),
    error,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, alias ? "Save alias" : "Add alias"),
      alias ? h("button", { type: "button", onclick: () => this.showForm(null) }, "Cancel") : null));
    put(this.formBox, form);
  }

  // One target: a catalogue entry (one no longer listed stays selectable), its weight, and its place.
  addRow(target) {
    const names = this.entries.map((entry) => entry.name);
    if (target.model && !names.includes(target.model)) names.unshift(target.model);
    const index = this.rows.children.length + 1;
    const model = h("select", { name: "target_model", "aria-label": `Target ${index} model` },
      h("option", { value: "" }, "Choose a model…"), names.map((entry) => h("option", { value: entry }, entry)));
    model.value = target.model ?? "";
    const weight = h("input", { type: "number", name: "target_weight", min: "0", step: "any", inputmode: "decimal",
      "aria-label": `Target ${index} weight`, class: "alias-weight" });
    weight.value = String(target.weight ?? 1);
    const row = h("li", { class: "alias-target-row" }, model, weight,
      h("button", { type: "button", class: "small", "aria-label": `Move target ${index} up`, onclick: () => this.move(row, -1) }, "↑"),
      h("button", { type: "button", class: "small", "aria-label": `Move target ${index} down`, onclick: () => this.move(row, 1) }, "↓"),
      h("button", { type: "button", class: "small", "aria-label": `Remove target ${index}`, onclick: () => { row.remove(); this.relabel(); } }, "Remove"));
    this.rows.append(row);
    return row;
  }

  move(row, step) {
    const other = step < 0 ? row.previousElementSibling : row.nextElementSibling;
    if (!other) return;
    if (step < 0) other.before(row);
    else other.after(row);
    this.relabel();
    row.querySelector("select").focus();
  }

  // Labels follow positions, so "Target 1" is always the first tried.
  relabel() {
    [...this.rows.children].forEach((row, at) => {
      const [model, weight, up, down, remove] = row.children;
      model.setAttribute("aria-label", `Target ${at + 1} model`);
      weight.setAttribute("aria-label", `Target ${at + 1} weight`);
      up.setAttribute("aria-label", `Move target ${at + 1} up`);
      down.setAttribute("aria-label", `Move target ${at + 1} down`);
      remove.setAttribute("aria-label", `Remove target ${at + 1}`);
    });
  }

  async submit(form, error) {
    error.hidden = true;
    const targets = [...this.rows.children].map((row) => ({ model: row.children[0].value,
      weight: row.children[1].value === "" ? 1 : Number(row.children[1].value) }));
    const body = { name: form.elements.name.value.trim(), strategy: form.elements.strategy.value, targets };
    const old = this.editing;
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const saved = await this.ctx.api(old ? `/api/aliases/${old.id}` : "/api/aliases", { method: old ? "PATCH" : "POST", body });
      const index = this.aliases.findIndex((item) => item.id === saved.id);
      if (index < 0) this.aliases.push(saved);
      else this.aliases[index] = saved;
      this.aliases.sort((a, b) => a.name.localeCompare(b.name));
      this.render();
      this.showForm(null);
      this.ctx.toast(`Alias ${saved.name} ${old ? "saved" : "added"}.`, "success");
    } catch (problem) {
      button.disabled = false;
      const fields = fieldErrors(problem);
      put(error, h("p", {}, `Not saved: ${errorText(problem)}`));
      if (fields.name) form.elements.name.setAttribute("aria-invalid", "true");
      error.hidden = false;
    }
  }
}
