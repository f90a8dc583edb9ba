// Usage: the caller's tokens (or cost) per day stacked by model for a chosen range (a hand-drawn SVG chart),
// tables by key and by facet, what is left of their budgets; for admins, every user with their budget editable
// (docs/api.md, Usage and budgets). The colours are usage.css's `.c0`…`.c7` (no inline style: the CSP forbids it).
import { errorBox, errorText, field, h, labelCells, loading, pageHeader, put } from "../ui.js";

const LIMITS = [
  ["tokens_per_day", "Tokens/day"], ["tokens_per_month", "Tokens/month"], ["cost_per_day", "Cost/day"],
  ["cost_per_month", "Cost/month"], ["requests_per_minute", "Requests/min"], ["tokens_per_minute", "Tokens/min"],
];
const COLORS = ["#3b6ea5", "#d9822b", "#3a9d5d", "#b2455f", "#7d5ba6", "#8a8f2b", "#2b8a8a", "#6b6b6b"];
const SVG = "http://www.w3.org/2000/svg";

export async function mount(root, ctx) {
  const page = new UsagePage(root, ctx);
  await page.start();
  return () => { page.stopped = true; };
}

function isoDay(date) {
  return date.toISOString().slice(0, 10);
}

function number(value, metric) {
  return metric === "cost" ? Number(value).toFixed(4) : Number(value).toLocaleString("en");
}

class UsagePage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.admin = Boolean(ctx.user?.is_admin);
    this.stopped = false;
  }

  async start() {
    const today = new Date();
    const from = new Date(today.getTime() - 29 * 86400000);
    this.from = h("input", { type: "date", name: "from", value: isoDay(from) });
    this.to = h("input", { type: "date", name: "to", value: isoDay(today) });
    this.metric = h("select", { name: "metric" }, h("option", { value: "tokens" }, "Tokens"), h("option", { value: "cost" }, "Cost"));
    const form = h("form", { class: "card usage-range", "aria-label": "Range", onsubmit: (event) => { event.preventDefault(); this.load(); } },
      field("From", this.from), field("To", this.to), field("Show", this.metric),
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Show")));
    this.metric.addEventListener("change", () => this.load());
    this.body = h("div", { class: "usage-body" });
    this.usersBox = this.admin ? h("section", { class: "card usage-users", "aria-labelledby": "usage-users-title" }) : null;
    put(this.root, pageHeader("Usage", "Tokens and cost of your calls to the models, by day, model, key and door, and what is left of your budget."),
      form, this.body, this.usersBox);
    await Promise.all([this.load(), this.admin ? this.loadUsers() : null]);
  }

  query(groupBy) {
    // An empty date is left out (the server's default), not sent empty: the API refuses an empty date.
    const params = new URLSearchParams({ group_by: groupBy });
    if (this.from.value) params.set("from", this.from.value);
    if (this.to.value) params.set("to", this.to.value);
    return this.ctx.api(`/api/usage?${params}`);
  }

  async load() {
    put(this.body, loading("Loading usage…"));
    let byDay, byKey, byFacet, budget;
    try {
      [byDay, byKey, byFacet, budget] = await Promise.all([this.query("day,model"), this.query("key"),
        this.query("facet"), this.ctx.api("/api/budget")]);
    } catch (error) {
      if (!this.stopped) put(this.body, errorBox(`Usage could not be loaded: ${errorText(error)}`, () => this.load()));
      return;
    }
    if (this.stopped) return;
    const metric = this.metric.value;
    const totals = byDay.totals;
    put(this.body,
      h("section", { class: "card usage-chart-card", "aria-labelledby": "usage-chart-title" },
        h("h2", { id: "usage-chart-title" }, metric === "cost" ? "Cost per day, by model" : "Tokens per day, by model"),
        h("p", { class: "usage-totals" }, `${totals.requests.toLocaleString("en")} requests · ${totals.total_tokens.toLocaleString("en")} tokens (${totals.prompt_tokens.toLocaleString("en")} in, ${totals.completion_tokens.toLocaleString("en")} out) · cost ${totals.cost.toFixed(4)}`),
        byDay.results.length ? this.chart(byDay.results, metric) : h("p", { class: "empty" }, "No usage in this range.")),
      h("div", { class: "usage-tables" },
        this.table("By key", "usage-by-key", byKey.results, (row) => row.key ? (row.key_name || `key ${row.key}`) : "No key (dashboard)", metric),
        this.table("By facet", "usage-by-facet", byFacet.results, (row) => row.facet, metric)),
      this.budget(budget));
  }

  chart(results, metric) {
    const value = (row) => (metric === "cost" ? row.cost : row.total_tokens);
    const days = [];
    for (let day = new Date(`${this.from.value}T00:00:00Z`); isoDay(day) <= this.to.value; day = new Date(day.getTime() + 86400000)) days.push(isoDay(day));
    const models = [...new Set(results.map((row) => row.model))].sort();
    const stacks = new Map(days.map((day) => [day, new Map()]));
    for (const row of results) stacks.get(row.day)?.set(row.model, value(row));
    const max = Math.max(...days.map((day) => [...stacks.get(day).values()].reduce((a, b) => a + b, 0)), 1e-9);
    const width = 720, height = 240, left = 56, bottom = 24, top = 8;
    const step = (width - left) / days.length, bar = Math.max(1, step * 0.75);
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("class", "usage-chart");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `${metric === "cost" ? "Cost" : "Tokens"} per day from ${this.from.value} to ${this.to.value}, stacked by model`);
    const add = (tag, attrs, text) => {
      const node = document.createElementNS(SVG, tag);
      for (const [name, attr] of Object.entries(attrs)) node.setAttribute(name, attr);
      if (text !== undefined) node.textContent = text;
      svg.append(node);
      return node;
    };
    const scale = (height - bottom - top) / max;
    add("line", { x1: left, y1: height - bottom, x2: width, y2: height - bottom, class: "axis" });
    add("text", { x: left - 4, y: top + 10, "text-anchor": "end", class: "tick" }, number(max, metric));
    add("text", { x: left - 4, y: height - bottom, "text-anchor": "end", class: "tick" }, "0");
    days.forEach((day, index) => {
      let y = height - bottom;
      models.forEach((model, modelIndex) => {
        const amount = stacks.get(day).get(model) || 0;
        if (!amount) return;
        const size = amount * scale;
        y -= size;
        add("rect", { x: left + index * step, y, width: bar, height: Math.max(size, 0.5), fill: COLORS[modelIndex % COLORS.length],
          "data-day": day, "data-model": model }).append(Object.assign(document.createElementNS(SVG, "title"),
          { textContent: `${day} · ${model}: ${number(amount, metric)}` }));
      });
      if (index === 0 || index === days.length - 1 || (days.length > 7 && index % Math.ceil(days.length / 6) === 0)) {
        add("text", { x: left + index * step + bar / 2, y: height - 6, "text-anchor": "middle", class: "tick" }, day.slice(5));
      }
    });
    const legend = h("ul", { class: "usage-legend", "aria-label": "Models" }, ...models.map((model, index) =>
      h("li", {}, h("span", { class: `swatch c${index % COLORS.length}` }), model)));
    return h("div", { class: "usage-chart-wrap" }, svg, legend);
  }

  table(title, id, rows, label, metric) {
    const heading = h("h2", { id }, title);
    if (!rows.length) return h("section", { class: "card", "aria-labelledby": id }, heading, h("p", { class: "empty" }, "Nothing yet."));
    const columns = ["", "Requests", "Tokens in", "Tokens out", metric === "cost" ? "Cost" : "Total tokens"];
    const table = h("table", { class: "usage-table" },
      h("thead", {}, h("tr", {}, ...columns.map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, ...rows.map((row) => h("tr", {}, h("th", { scope: "row" }, label(row)),
        ...[row.requests, row.prompt_tokens, row.completion_tokens].map((value) => h("td", {}, value.toLocaleString("en"))),
        h("td", {}, metric === "cost" ? row.cost.toFixed(4) : row.total_tokens.toLocaleString("en"))))));
    labelCells(table);
    return h("section", { class: "card", "aria-labelledby": id }, heading, h("div", { class: "table-wrap" }, table));
  }

  budget(left) {
    const rows = [];
    // Each group of the caller's that has a budget counts its members' calls together.
    const scopes = [[left.user, "Your budget"], [left.key, "This key's budget"],
      ...(left.groups || []).map((group) => [group.left, `Group ${group.name}'s budget`])];
    for (const [limits, name] of scopes) {
      for (const [limit, text] of LIMITS) {
        const entry = limits?.[limit];
        if (entry && entry.limit !== null) rows.push(h("li", {}, `${name}: ${text} ${entry.used} used of ${entry.limit}, ${entry.remaining} left (renews ${new Date(entry.resets_at).toLocaleString()})`));
      }
    }
    return h("section", { class: "card", "aria-labelledby": "usage-budget-title" }, h("h2", { id: "usage-budget-title" }, "Budget"),
      rows.length ? h("ul", { class: "usage-budget" }, ...rows) : h("p", { class: "empty" }, "No limit is set for you."));
  }

  async loadUsers() {
    const title = h("h2", { id: "usage-users-title" }, "Users and budgets");
    put(this.usersBox, title, loading("Loading users…"));
    let users;
    try {
      users = (await this.ctx.api("/api/users?limit=200")).results;
    } catch (error) {
      if (!this.stopped) put(this.usersBox, title, errorBox(`Users could not be loaded: ${errorText(error)}`, () => this.loadUsers()));
      return;
    }
    if (this.stopped) return;
    const table = h("table", { class: "usage-table usage-users-table" },
      h("thead", {}, h("tr", {}, ...["User", "This month", ...LIMITS.map(([, text]) => text), ""].map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, ...users.map((user) => this.userRow(user))));
    labelCells(table);
    put(this.usersBox, title, h("p", { class: "hint" }, "Empty: no limit. Limits count in UTC minutes, days and months."),
      h("div", { class: "table-wrap" }, table));
  }

  userRow(user) {
    const inputs = LIMITS.map(([limit, text]) => h("input", { type: "number", min: "0", step: limit.startsWith("cost") ? "0.01" : "1",
      name: limit, value: user.budget[limit] ?? "", "aria-label": `${text} for ${user.username}` }));
    const status = h("span", { role: "status", class: "usage-saved" });
    const save = h("button", { type: "button", "aria-label": `Save the budget of ${user.username}`, onclick: async () => {
      const body = Object.fromEntries(inputs.map((input) => [input.name, input.value === "" ? null : Number(input.value)]));
      save.disabled = true;
      try {
        await this.ctx.api(`/api/users/${user.id}/budget`, { method: "PUT", body });
        status.textContent = "Saved.";
      } catch (error) {
        status.textContent = errorText(error);
      } finally {
        save.disabled = false;
      }
    } }, "Save");
    return h("tr", { "data-user": String(user.id) },
      h("th", { scope: "row" }, user.username, user.is_active ? null : h("span", { class: "badge status error" }, "inactive")),
      h("td", {}, `${user.month_tokens.toLocaleString("en")} tokens, ${user.month_cost.toFixed(4)}`),
      ...inputs.map((input) => h("td", {}, input)), h("td", {}, save, status));
  }
}
