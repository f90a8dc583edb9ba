// A group's budget (GET/PUT /api/groups/:id/budget, docs/api.md, Usage and budgets): each limit with what the
// group's members together used of it; an admin edits the limits (empty: no limit) and saves them all at once.
// The limits are the answer's own (`budget` names every one, null: none): no list of them is kept here.
import { errorBox, errorText, h, labelCells, loading, put } from "../../ui.js";

// "tokens_per_day" -> "Tokens per day".
const limitLabel = (name) => name.replaceAll("_", " ").replace(/^./, (first) => first.toUpperCase());

export class BudgetSection {
  constructor({ ctx, group, admin }) {
    this.ctx = ctx;
    this.group = group;
    this.admin = admin;
    this.body = h("div", {}, loading("Loading the budget…"));
    this.element = h("section", { class: "card groups-budget", "aria-labelledby": "groups-budget-title" },
      h("h2", { id: "groups-budget-title" }, "Budget"), this.body);
  }

  path() {
    return `/api/groups/${this.group.id}/budget`;
  }

  async load() {
    let answer;
    try {
      answer = await this.ctx.api(this.path());
    } catch (error) {
      put(this.body, errorBox(`The budget could not be loaded: ${errorText(error)}`, () => this.load()));
      return;
    }
    this.render(answer);
  }

  render({ budget, left }) {
    const inputs = [];
    const rows = Object.entries(budget).map(([name, value]) => {
      const label = limitLabel(name);
      const used = left?.[name];
      let cell = value === null ? "no limit" : String(value);
      if (this.admin) {
        cell = h("input", { type: "number", min: "0", step: name.startsWith("cost") ? "0.01" : "1", name,
          value: value ?? "", "aria-label": `${label} for ${this.group.name}` });
        inputs.push(cell);
      }
      return h("tr", { dataset: { limit: name } }, h("th", { scope: "row" }, label), h("td", {}, cell),
        h("td", { class: "num" }, used && used.limit !== null ? `${used.used} used, ${used.remaining} left` : "—"));
    });
    const table = h("table", { class: "groups-budget-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Limit"), h("th", { scope: "col" }, "Value"),
        h("th", { scope: "col", class: "num" }, "The members together"))),
      h("tbody", {}, rows));
    labelCells(table);
    const problem = h("div", { class: "form-error", role: "alert" });
    const save = async (event) => {
      event.preventDefault();
      problem.textContent = "";
      const body = Object.fromEntries(inputs.map((input) => [input.name, input.value === "" ? null : Number(input.value)]));
      try {
        const saved = await this.ctx.api(this.path(), { method: "PUT", body });
        this.ctx.toast(`The budget of ${this.group.name} saved.`, "success");
        this.render(saved);
      } catch (error) {
        problem.textContent = errorText(error);
      }
    };
    const content = [h("p", { class: "hint" }, "What every member's calls together may use; each member's own budget "
      + "still applies. Counted in UTC minutes, days and months."), h("div", { class: "table-wrap" }, table)];
    put(this.body, this.admin ? h("form", { novalidate: true, "aria-label": `Budget of ${this.group.name}`, onsubmit: save },
      content, problem, h("button", { type: "submit", class: "primary" }, "Save budget")) : content);
  }
}
