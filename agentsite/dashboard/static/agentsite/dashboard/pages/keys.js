// Keys: the user's API keys (docs/api.md, API keys). Making one shows its secret once, with a copy button;
// the list shows each key's prefix, scopes, dates and whether it works; revoking asks first. Admins may also
// give their own keys the admin scope. Below, the connected apps (docs/api.md, MCP authorization): the OAuth
// clients (MCP connectors, A2A clients) holding a live grant for the user, with what each may use (its grants'
// resources: /mcp, /a2a), each disconnected at once after a confirmation.
import {
  confirmDialog, copyField, errorBox, errorText, field, fieldErrors, formatTime, h, hint, labelCells, loading, pageHeader,
  put,
} from "../ui.js";

const SCOPES = [
  ["v1", "v1: the OpenAI-compatible API (/v1)"],
  ["mcp", "mcp: the MCP server (/mcp)"],
  ["a2a", "a2a: A2A, call your agents from other agents (/a2a)"],
  ["api", "api: the dashboard's API (/api), as you"],
  ["admin", "admin: admin operations too"],
];
const STATUS = { active: "Active", revoked: "Revoked", expired: "Expired", password_changed: "Password changed since",
  user_inactive: "Account inactive" };

export async function mount(root, ctx) {
  const page = new KeysPage(root, ctx);
  await page.start();
  return () => { page.stopped = true; };
}

class KeysPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.admin = Boolean(ctx.user?.is_admin);
    this.stopped = false;
  }

  async start() {
    this.secretBox = h("div", { class: "keys-secret", "aria-live": "polite" });
    this.listBox = h("section", { class: "card keys-list", "aria-labelledby": "keys-list-title" });
    this.appsBox = h("section", { class: "card keys-apps", "aria-labelledby": "keys-apps-title" });
    put(this.root,
      pageHeader("API keys", "Keys for the OpenAI-compatible API, the MCP server, your agents over A2A or the API, for SDKs, scripts and other agents: each acts as you, within its scopes."),
      h("div", { class: "keys-layout" }, h("div", {}, this.createForm(), this.secretBox), this.listBox), this.appsBox);
    await Promise.all([this.load(), this.loadApps()]);
  }

  createForm() {
    const error = h("div", { class: "form-error", role: "alert", hidden: true });
    const scopes = h("fieldset", { class: "keys-scopes" }, h("legend", {}, "Scopes"),
      ...SCOPES.filter(([scope]) => scope !== "admin" || this.admin).map(([scope, label]) => {
        const input = h("input", { type: "checkbox", name: "scope", value: scope, id: `key-scope-${scope}` });
        input.defaultChecked = scope === "v1";  // what form.reset() goes back to
        return h("div", { class: "field check" }, input, h("label", { for: input.id }, label));
      }));
    const button = h("button", { type: "submit", class: "primary" }, "Create key");
    const form = h("form", { class: "card keys-create", "aria-labelledby": "keys-create-title", novalidate: true,
      onsubmit: async (event) => {
        event.preventDefault();
        error.hidden = true;
        const elements = form.elements;
        for (const element of elements) element.removeAttribute?.("aria-invalid");
        const body = { name: elements.name.value.trim(),
          scopes: [...form.querySelectorAll("input[name=scope]:checked")].map((input) => input.value) };
        if (elements.expires_at.value) body.expires_at = new Date(elements.expires_at.value).toISOString();
        button.disabled = true;
        try {
          const key = await this.ctx.api("/api/keys", { method: "POST", body });
          form.reset();
          this.showSecret(key);
          await this.load();
        } catch (problem) {
          for (const name of Object.keys(fieldErrors(problem))) elements[name]?.setAttribute("aria-invalid", "true");
          error.textContent = errorText(problem);
          error.hidden = false;
        } finally {
          button.disabled = false;
        }
      } },
    h("h2", { id: "keys-create-title" }, "New key"),
    field("Name", h("input", { name: "name", autocomplete: "off", maxlength: "100", required: true, placeholder: "laptop" })),
    scopes,
    field("Expires", h("input", { name: "expires_at", type: "datetime-local" }), hint("Empty: never.")),
    error, h("div", { class: "actions" }, button));
    return form;
  }

  // The secret, once: it is not stored anywhere the server can show it again.
  showSecret(key) {
    const { input: value, button: copy, status: copied } = copyField(key.key, `Secret of ${key.name}`,
      { inputClass: "keys-secret-value" });
    put(this.secretBox, h("section", { class: "card keys-new-secret", "aria-labelledby": "keys-secret-title" },
      h("h2", { id: "keys-secret-title" }, `Key “${key.name}” created`),
      h("p", { class: "notice", role: "note" }, "Copy the secret now: it is shown this once and cannot be shown again."),
      h("div", { class: "keys-secret-row" }, value, copy), copied,
      h("div", { class: "actions" }, h("button", { type: "button", onclick: () => put(this.secretBox) }, "Done"))));
    value.focus();
    value.select();
  }

  async load() {
    const title = h("h2", { id: "keys-list-title" }, "Your keys");
    put(this.listBox, title, loading("Loading keys…"));
    let keys;
    try {
      keys = (await this.ctx.api("/api/keys?limit=200")).results;
    } catch (error) {
      if (!this.stopped) put(this.listBox, title, errorBox(`The keys could not be loaded: ${errorText(error)}`, () => this.load()));
      return;
    }
    if (this.stopped) return;
    if (!keys.length) {
      put(this.listBox, title, h("p", { class: "empty" }, "No key yet."));
      return;
    }
    const table = h("table", { class: "keys-table" },
      h("thead", {}, h("tr", {}, ...["Name", "Key", "Scopes", "Created", "Expires", "Last used", "Status", ""]
        .map((label) => h("th", { scope: "col" }, label)))),
      h("tbody", {}, ...keys.map((key) => h("tr", { "data-key": String(key.id) },
        h("th", { scope: "row" }, key.name),
        h("td", {}, h("code", {}, `${key.prefix}…`)),
        h("td", {}, key.scopes.join(", ")),
        h("td", {}, when(key.created_at)),
        h("td", {}, key.expires_at ? when(key.expires_at) : "Never"),
        h("td", {}, key.last_used_at ? when(key.last_used_at) : "Never"),
        h("td", {}, h("span", { class: `badge status ${key.status === "active" ? "ok" : "error"}` }, STATUS[key.status] || key.status)),
        h("td", {}, key.revoked ? null : h("button", { type: "button", class: "danger", "aria-label": `Revoke ${key.name}`,
          onclick: () => this.revoke(key) }, "Revoke"))))));
    labelCells(table);
    put(this.listBox, title, h("div", { class: "table-wrap" }, table));
  }

  async revoke(key) {
    if (!await confirmDialog(`Revoke the key “${key.name}” (${key.prefix}…)? Programs using it stop working at once.`, { confirmLabel: "Revoke" })) return;
    try {
      await this.ctx.api(`/api/keys/${key.id}`, { method: "DELETE" });
      this.ctx.toast(`Revoked ${key.name}.`, "success");
    } catch (error) {
      this.ctx.toast(`Not revoked: ${errorText(error)}`, "error");
    }
    await this.load();
  }

  // The apps connected through OAuth (Claude, ChatGPT, VS Code... added with the MCP page's URL; A2A clients
  // calling an agent's /a2a URL).
  async loadApps() {
    const title = h("h2", { id: "keys-apps-title" }, "Connected apps");
    const about = h("p", { class: "hint" }, "Apps you allowed to use agentsite's MCP server or your agents over A2A as you. Disconnecting one ends its "
      + "access at once.");
    put(this.appsBox, title, about, loading("Loading connected apps…"));
    let apps;
    try {
      apps = (await this.ctx.api("/api/oauth/apps")).results;
    } catch (error) {
      if (!this.stopped) put(this.appsBox, title, about, errorBox(`The connected apps could not be loaded: ${errorText(error)}`, () => this.loadApps()));
      return;
    }
    if (this.stopped) return;
    if (!apps.length) {
      put(this.appsBox, title, h("p", { class: "empty" }, "No app is connected. To connect one (Claude, ChatGPT, VS Code, "
        + "the MCP Inspector), add agentsite's MCP URL, shown on the ", h("a", { href: "#/mcp" }, "MCP page"),
      ", as a connector in the app, or give an A2A client an agent's A2A URL, shown on the ",
      h("a", { href: "#/agents" }, "Agents page"), ": it asks you to sign in here and to allow it."));
      return;
    }
    const table = h("table", { class: "keys-table keys-apps-table" },
      h("thead", {}, h("tr", {}, ...["App", "Redirects to", "May use", "Connected", "Last used", "Expires", ""]
        .map((label) => h("th", { scope: "col" }, label)))),
      h("tbody", {}, ...apps.map((app) => h("tr", { "data-app": app.client_id },
        h("th", { scope: "row" }, app.name || app.client_id),
        h("td", {}, h("code", {}, app.redirect_host || "—")),
        h("td", {}, resourceNames(app)),
        h("td", {}, when(app.connected_at)),
        h("td", {}, app.last_used_at ? when(app.last_used_at) : "Never"),
        h("td", {}, when(app.expires_at)),
        h("td", {}, h("button", { type: "button", class: "danger", "aria-label": `Disconnect ${app.name || app.client_id}`,
          onclick: () => this.disconnect(app) }, "Disconnect"))))));
    labelCells(table);
    put(this.appsBox, title, about, h("div", { class: "table-wrap" }, table));
  }

  async disconnect(app) {
    const name = app.name || app.client_id;
    if (!await confirmDialog(`Disconnect “${name}” (${app.redirect_host})? It loses access to your account at once; `
      + "to use it again, connect it again from the app.", { confirmLabel: "Disconnect" })) return;
    try {
      await this.ctx.api(`/api/oauth/apps/${encodeURIComponent(app.client_id)}`, { method: "DELETE" });
      this.ctx.toast(`Disconnected ${name}.`, "success");
    } catch (error) {
      this.ctx.toast(`Not disconnected: ${errorText(error)}`, "error");
    }
    await this.loadApps();
  }
}

// What an app's grants let it use, by name: the resources are this server's <origin>/mcp and <origin>/a2a.
const RESOURCES = { "/mcp": "MCP", "/a2a": "A2A" };

function resourceNames(app) {
  const resources = app.resources?.length ? app.resources : [app.resource].filter(Boolean);
  return resources.map((resource) => {
    let path = resource;
    try {
      path = new URL(resource).pathname.replace(/\/$/, "");
    } catch {
      // Not a URL: shown as it is.
    }
    return RESOURCES[path] || resource;
  }).join(", ") || "—";
}

function when(iso) {
  return h("time", { datetime: iso }, formatTime(iso));
}
