// Activity (admins only: app.js shows the link and the route to admins alone): the health strip
// (pages/activity/health.js) and the audit log (GET /api/audit, docs/api.md, Audit log), newest first, filtered
// by action, actor, outcome and time, 50 events at a time with "Load more". A failed load is a toast; the
// events already shown stay.
import { errorBox, errorText, field, formatTime, h, hint, labelCells, loading, pageHeader, put } from "../ui.js";
import { healthStrip } from "./activity/health.js";

const PAGE_SIZE = 50;
// Suggestions for the action filter: the families (a prefix ending in a dot matches all of its actions) and
// the actions of agentsite/core/audit.py ACTIONS (tests/dashboard/test_activity.py keeps the two lists equal).
// Any other text is sent as typed.
const ACTIONS = [
  "auth.login", "auth.logout", "auth.register", "auth.password_change", "auth.refresh_reuse", "auth.sso_failed",
  "admin.login", "user.activation", "config.change", "connection.create", "connection.update",
  "connection.delete", "alias.create", "alias.update", "alias.delete", "mcp.connect", "mcp.disconnect",
  "plugin.load", "plugin.reload", "plugin.error", "key.create", "key.revoke", "key.scope_refused",
  "budget.change", "webhook.refused", "group.create", "group.update", "group.delete", "group.member_add",
  "group.member_update", "group.member_remove", "access.change", "resource.transfer", "user.delete",
  "agent.create", "agent.update", "agent.delete", "agent.restore", "oauth.client_registered", "oauth.consent",
  "oauth.revoke", "oauth.token_reuse", "a2a_remote.create", "a2a_remote.delete", "a2a_remote.refresh",
];
const OUTCOMES = [["", "Any"], ["success", "Success"], ["failure", "Failure"], ["refused", "Refused"]];
const COLUMNS = ["Time", "Action", "Outcome", "Actor", "Door", "Client", "Target", "Details"];

export async function mount(root, ctx) {
  const page = new ActivityPage(root, ctx);
  await page.start();
  return () => page.stop();
}

function families() {
  return [...new Set(ACTIONS.map((action) => `${action.split(".")[0]}.`))];
}

// An event's details as "name: value" pieces (field lists joined); the server keeps secrets' values out.
function details(event) {
  return Object.entries(event.details || {}).map(([name, value]) =>
    `${name}: ${Array.isArray(value) ? value.join(", ") : typeof value === "object" && value !== null ? JSON.stringify(value) : String(value)}`)
    .join("; ");
}

class ActivityPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.stopped = false;
    this.events = [];
    this.count = 0;
    this.ticket = 0;
  }

  async start() {
    this.health = healthStrip(this.ctx);
    this.listBox = h("section", { class: "card activity-log", "aria-labelledby": "activity-log-title" });
    put(this.root, pageHeader("Activity", "How the server is doing, and who did what: log-ins, keys, configuration, connections, MCP servers and plugins."),
      this.health.element, this.filterForm(), this.listBox);
    await this.load();
  }

  stop() {
    this.stopped = true;
    this.health.stop();
  }

  filterForm() {
    const list = h("datalist", { id: "activity-actions" }, [...families(), ...ACTIONS].map((value) => h("option", { value })));
    this.filters = {
      action: h("input", { name: "action", list: list.id, autocomplete: "off", spellcheck: "false", maxlength: "100",
        placeholder: "auth." }),
      actor: h("input", { name: "actor", autocomplete: "off", spellcheck: "false", maxlength: "150" }),
      outcome: h("select", { name: "outcome" }, OUTCOMES.map(([value, label]) => h("option", { value }, label))),
      from: h("input", { name: "from", type: "datetime-local" }),
      to: h("input", { name: "to", type: "datetime-local" }),
    };
    const form = h("form", { class: "card activity-filters", "aria-label": "Filters", novalidate: true,
      onsubmit: (event) => { event.preventDefault(); this.load(); },
      onreset: () => setTimeout(() => this.load()) },
    field("Action", this.filters.action, hint("A name, or a family ending in a dot.")), list,
    field("Actor", this.filters.actor, hint("A username or a user id.")),
    field("Outcome", this.filters.outcome),
    field("From", this.filters.from), field("To", this.filters.to),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Filter"),
      h("button", { type: "reset" }, "Clear")));
    return form;
  }

  // The query for the events from `offset` on; throws on a time the browser cannot read.
  query(offset) {
    const params = new URLSearchParams({ limit: String(PAGE_SIZE), offset: String(offset) });
    for (const name of ["action", "actor", "outcome"]) {
      const value = this.filters[name].value.trim();
      if (value) params.set(name, value);
    }
    for (const name of ["from", "to"]) {
      const value = this.filters[name].value;
      if (!value) continue;
      const moment = new Date(value);
      if (Number.isNaN(moment.getTime())) throw new Error(`${name}: not a date and time.`);
      params.set(name, moment.toISOString());
    }
    return params;
  }

  // The first page for the filters (more=false), or the next one added below the events shown.
  async load(more = false) {
    const ticket = ++this.ticket;  // a newer load (the filters changed) wins over one still under way
    const title = h("h2", { id: "activity-log-title" }, "Audit log");
    let params;
    try {
      params = this.query(more ? this.events.length : 0);
    } catch (error) {
      this.ctx.toast(error.message, "error");
      return;
    }
    if (more) this.more?.setAttribute("aria-busy", "true");
    else put(this.listBox, title, loading("Loading events…"));
    let page;
    try {
      page = await this.ctx.api(`/api/audit?${params}`);
    } catch (error) {
      if (this.stopped || ticket !== this.ticket) return;
      this.ctx.toast(`The audit log could not be loaded: ${errorText(error)}`, "error");
      if (more) this.more?.removeAttribute("aria-busy");
      else put(this.listBox, title, errorBox("The audit log could not be loaded.", () => this.load()));
      return;
    }
    if (this.stopped || ticket !== this.ticket) return;
    // New events push older ones down the pages: one already shown may come again, and is shown once.
    const seen = new Set(more ? this.events.map((event) => event.id) : []);
    this.events = [...(more ? this.events : []), ...page.results.filter((event) => !seen.has(event.id))];
    this.count = page.count;
    this.render(title);
  }

  render(title) {
    if (!this.events.length) {
      const filtered = Object.values(this.filters).some((control) => control.value.trim());
      put(this.listBox, title, h("p", { class: "empty" }, filtered ? "No event matches these filters." : "No event yet."));
      return;
    }
    const table = h("table", { class: "activity-table" },
      h("thead", {}, h("tr", {}, COLUMNS.map((label) => h("th", { scope: "col" }, label)))),
      h("tbody", {}, this.events.map((event) => this.row(event))));
    labelCells(table);
    const shown = Math.min(this.events.length, this.count);
    this.more = shown < this.count ? h("button", { type: "button", onclick: () => this.load(true) }, "Load more") : null;
    put(this.listBox, title,
      h("p", { class: "summary activity-count" }, `${shown} of ${this.count} event${this.count === 1 ? "" : "s"}, newest first.`),
      h("div", { class: "table-wrap" }, table), this.more ? h("div", { class: "actions" }, this.more) : null);
  }

  row(event) {
    const outcome = event.outcome === "success" ? "ok" : "error";
    return h("tr", { "data-event": String(event.id), "data-action": event.action, "data-outcome": event.outcome },
      h("td", {}, h("time", { datetime: event.time }, formatTime(event.time))),
      h("th", { scope: "row" }, h("code", {}, event.action)),
      h("td", {}, h("span", { class: `badge status ${outcome}` }, event.outcome)),
      h("td", { class: "activity-actor" }, event.actor || "–", event.actor_id === null ? null : h("span", { class: "hint" }, ` (id ${event.actor_id})`)),
      h("td", { class: "activity-door" }, event.door),
      h("td", {}, event.ip || "–", event.user_agent ? h("p", { class: "hint activity-agent", title: event.user_agent }, event.user_agent) : null),
      h("td", { class: "activity-target" }, event.target || "–"),
      h("td", { class: "activity-details" }, details(event) || "–"));
  }
}
