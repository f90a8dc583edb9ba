// Settings, admins only: the connections (the upstream LLM endpoints; /api/connections). Each is listed with
// its provider, URL, models (or the last discovery's list, and its failure in the upstream's words), and can be
// edited, disabled or enabled, refreshed (POST /api/connections/:id/discover) and deleted. The API key and the
// extra headers' values are write-only: the form says whether they are set, and replaces or removes them.
import { checkbox, confirmDialog, errorBox, errorText, field, fieldErrors, formatTime, h, hint, loading, put } from "../../ui.js";

const LABELS = { name: "Name", provider: "Provider", base_url: "Base URL", api_key: "API key", models: "Model names",
  headers: "Extra headers", timeout_s: "Timeout (seconds)", enabled: "Enabled" };

export class ConnectionsSection {
  // options: ctx (the page's), onChange() after any change (the alias editor's choices follow).
  constructor({ ctx, onChange }) {
    Object.assign(this, { ctx, onChange });
    this.connections = [];
    this.providers = []; // GET /api/meta's providers: the form's choices, the first the default
    this.editing = null; // the connection the form edits (null: a new one)
    this.list = h("ul", { class: "conn-list", "aria-label": "Connections" });
    this.formBox = h("div", { class: "conn-form-box" });
    this.element = h("section", { class: "card settings-connections", "aria-labelledby": "settings-connections-title" },
      h("h2", { id: "settings-connections-title" }, "Connections"),
      h("p", { class: "muted" }, "The upstream LLM servers. Each model of an enabled connection is the model ",
        h("code", {}, "<connection>/<model>"), " in chats, workflows, the scheduler and /v1."),
      this.list, this.formBox);
  }

  async load() {
    put(this.list, h("li", {}, loading("Loading the connections…")));
    try {
      const [connections, meta] = await Promise.all([this.ctx.api("/api/connections"), this.ctx.meta()]);
      this.connections = connections;
      this.providers = meta.providers;
    } catch (error) {
      put(this.list, h("li", {}, errorBox(`The connections could not be loaded: ${errorText(error)}`, () => this.load())));
      return;
    }
    this.render();
  }

  render() {
    put(this.list, this.connections.length ? this.connections.map((connection) => this.item(connection))
      : h("li", { class: "empty" }, "No connection yet: add one below."));
    if (!this.formBox.firstChild) this.showForm(null);
  }

  item(connection) {
    const models = connection.models === "discover"
      ? [`discovered: ${(connection.discovered || []).join(", ") || "none"}`,
        connection.discovered_at ? h("span", { class: "muted" }, " (", h("time", { datetime: connection.discovered_at }, formatTime(connection.discovered_at)), ")") : null]
      : (connection.models || []).join(", ") || "its provider's default model";
    return h("li", { class: ["card", "conn", connection.enabled ? "" : "disabled"], "aria-label": `Connection ${connection.name}`,
      dataset: { connection: connection.name } },
    h("div", { class: "conn-head" }, h("h3", {}, connection.name),
      h("span", { class: `badge ${connection.enabled ? "ok" : "muted"}` }, connection.enabled ? "Enabled" : "Disabled"),
      connection.is_default ? h("span", { class: "badge" }, "Default") : null),
    h("dl", { class: "conn-facts" },
      h("dt", {}, "Provider"), h("dd", {}, connection.provider),
      h("dt", {}, "Base URL"), h("dd", {}, connection.base_url || "the provider's default"),
      h("dt", {}, "API key"), h("dd", {}, connection.api_key_set ? "Set" : "Not set"),
      h("dt", {}, "Models"), h("dd", { class: "conn-models" }, models),
      connection.header_names?.length ? [h("dt", {}, "Headers"), h("dd", {}, connection.header_names.join(", "))] : null,
      h("dt", {}, "Timeout"), h("dd", {}, `${connection.timeout_s} s`)),
    connection.discovery_error ? h("p", { class: "conn-discovery-error", role: "alert" }, `Discovery failed: ${connection.discovery_error}`) : null,
    h("div", { class: "actions" },
      h("button", { type: "button", onclick: () => this.showForm(connection) }, "Edit"),
      h("button", { type: "button", onclick: (event) => this.save(connection, { enabled: !connection.enabled }, event.target) },
        connection.enabled ? "Disable" : "Enable"),
      connection.models === "discover" ? h("button", { type: "button", onclick: (event) => this.discover(connection, event.target) },
        "Refresh models") : null,
      h("button", { type: "button", class: "danger", onclick: () => this.remove(connection) }, "Delete")));
  }

  // --- actions -----------------------------------------------------------------------------------------

  replace(connection) {
    const index = this.connections.findIndex((item) => item.id === connection.id);
    if (index < 0) this.connections.push(connection);
    else this.connections[index] = connection;
    this.render();
    this.onChange();
  }

  async save(connection, changes, button) {
    button.disabled = true;
    try {
      this.replace(await this.ctx.api(`/api/connections/${connection.id}`, { method: "PATCH", body: changes }));
      this.ctx.toast(`Connection ${connection.name} saved.`, "success");
    } catch (error) {
      button.disabled = false;
      this.ctx.toast(`Not saved: ${errorText(error)}`, "error");
    }
  }

  async discover(connection, button) {
    button.disabled = true;
    button.textContent = "Refreshing…";
    try {
      const fresh = await this.ctx.api(`/api/connections/${connection.id}/discover`, { method: "POST" });
      this.replace(fresh);
      if (fresh.discovery_error) this.ctx.toast(`Discovery failed: ${fresh.discovery_error}`, "error");
      else this.ctx.toast(`${fresh.discovered.length} model(s) found on ${fresh.name}.`, "success");
    } catch (error) {
      button.disabled = false;
      button.textContent = "Refresh models";
      this.ctx.toast(`Discovery failed: ${errorText(error)}`, "error");
    }
  }

  async remove(connection) {
    if (!await confirmDialog(`Delete the connection ${connection.name}? Its models leave the catalogue; aliases keep naming them.`, { confirmLabel: "Delete" })) return;
    try {
      await this.ctx.api(`/api/connections/${connection.id}`, { method: "DELETE" });
      this.connections = this.connections.filter((item) => item.id !== connection.id);
      if (this.editing?.id === connection.id) this.showForm(null);
      this.render();
      this.onChange();
      this.ctx.toast(`Connection ${connection.name} deleted.`, "success");
    } catch (error) {
      this.ctx.toast(`Not deleted: ${errorText(error)}`, "error");
    }
  }

  // --- the form ----------------------------------------------------------------------------------------

  showForm(connection) {
    this.editing = connection;
    const value = connection || { name: "", provider: this.providers[0]?.name ?? "", base_url: "", models: [], timeout_s: 120, enabled: true, header_names: [] };
    const title = connection ? `Edit connection ${connection.name}` : "New connection";
    const titleId = connection ? "conn-form-title-edit" : "conn-form-title-new";
    const error = h("div", { class: "form-error", role: "alert", hidden: true });
    const discover = value.models === "discover";
    const names = h("textarea", { name: "models", rows: "3", spellcheck: "false", class: "mono" });
    names.value = discover ? "" : (value.models || []).join("\n");
    const namesField = field(LABELS.models, names, "One per line, as the upstream names them (e.g. llama3.2). Empty: the provider's default model.");
    namesField.hidden = discover;
    const mode = h("select", { name: "models_mode", onchange: () => { namesField.hidden = mode.value === "discover"; } },
      h("option", { value: "list" }, "The names listed below"), h("option", { value: "discover" }, "Discover (ask the upstream)"));
    mode.value = discover ? "discover" : "list";
    const provider = h("select", { name: "provider" }, this.providers.map(({ name, label }) => h("option", { value: name }, label)));
    provider.value = value.provider;
    const text = (name, type = "text", extra = {}) => {
      const input = h("input", { type, name, autocomplete: "off", spellcheck: "false", ...extra });
      input.value = value[name] ?? "";
      return input;
    };
    const form = h("form", { class: "conn-form", novalidate: true, "aria-labelledby": titleId,
      onsubmit: (event) => { event.preventDefault(); this.submit(form, error); } },
    h("h3", { id: titleId }, title),
    field(LABELS.name, text("name", "text", { required: true, pattern: "[a-z0-9_-]+" }), "Lowercase letters, digits, _ and -; models are named <name>/<model>."),
    field(LABELS.provider, provider),
    field(LABELS.base_url, text("base_url", "url"), "E.g. http://127.0.0.1:11434/v1 for Ollama. Empty: the provider's public endpoint."),
    field(LABELS.api_key, h("input", { type: "password", name: "api_key", autocomplete: "off",
      placeholder: connection?.api_key_set ? "A key is set: type to replace it" : "No key set" }),
    hint(connection?.api_key_set ? "Set (never shown). Leave empty to keep it." : "Not set."),
    connection?.api_key_set ? checkbox("Remove the key", h("input", { type: "checkbox", name: "api_key_clear" })) : null),
    field("Models", mode),
    namesField,
    field(LABELS.headers, h("textarea", { name: "headers", rows: "2", spellcheck: "false", class: "mono", placeholder: "X-Name: value" }),
      "One \"Name: value\" per line, sent with every request. Values are write-only: a name given again is replaced.",
      value.header_names?.length ? h("div", { class: "conn-header-removals" }, value.header_names.map((name) =>
        checkbox(`Remove the header ${name}`, h("input", { type: "checkbox", name: "header_remove", value: name })))) : null),
    field(LABELS.timeout_s, text("timeout_s", "number", { min: "0.1", max: "3600", step: "any", inputmode: "decimal" })),
    checkbox(LABELS.enabled, h("input", { type: "checkbox", name: "enabled", checked: Boolean(value.enabled) })),
    error,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, connection ? "Save connection" : "Add connection"),
      connection ? h("button", { type: "button", onclick: () => this.showForm(null) }, "Cancel") : null));
    put(this.formBox, form);
    if (connection) form.elements.name.focus();
  }

  // The form as a request body: everything for a new connection, only what changed for an edit.
  body(form) {
    const elements = form.elements;
    const discover = elements.models_mode.value === "discover";
    const body = {
      name: elements.name.value.trim(),
      provider: elements.provider.value,
      base_url: elements.base_url.value.trim(),
      models: discover ? "discover" : elements.models.value.split("\n").map((line) => line.trim()).filter(Boolean),
      timeout_s: elements.timeout_s.value === "" ? 120 : Number(elements.timeout_s.value),
      enabled: elements.enabled.checked,
    };
    const headers = {};
    for (const line of elements.headers.value.split("\n")) {
      const at = line.indexOf(":");
      if (line.trim()) headers[(at < 0 ? line : line.slice(0, at)).trim()] = at < 0 ? "" : line.slice(at + 1).trim();
    }
    for (const box of form.querySelectorAll("input[name=header_remove]:checked")) headers[box.value] = null;
    const old = this.editing;
    if (!old) {
      if (Object.keys(headers).length) body.headers = headers;
      if (elements.api_key.value.trim()) body.api_key = elements.api_key.value.trim();
      return body;
    }
    for (const name of Object.keys(body)) if (JSON.stringify(body[name]) === JSON.stringify(old[name])) delete body[name];
    if (Object.keys(headers).length) body.headers = headers;
    if (elements.api_key_clear?.checked) body.api_key = "";
    else if (elements.api_key.value.trim()) body.api_key = elements.api_key.value.trim();
    return body;
  }

  async submit(form, error) {
    error.hidden = true;
    for (const element of form.elements) element.removeAttribute?.("aria-invalid");
    const body = this.body(form);
    const old = this.editing;
    if (old && !Object.keys(body).length) {
      this.showForm(null);
      return;
    }
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const saved = await this.ctx.api(old ? `/api/connections/${old.id}` : "/api/connections", { method: old ? "PATCH" : "POST", body });
      this.showForm(null);
      this.replace(saved);
      this.ctx.toast(`Connection ${saved.name} ${old ? "saved" : "added"}.`, "success");
      if (saved.discovery_error) this.ctx.toast(`Discovery failed: ${saved.discovery_error}`, "error");
    } catch (problem) {
      button.disabled = false;
      const fields = fieldErrors(problem);
      for (const name of Object.keys(fields)) form.elements[name]?.setAttribute?.("aria-invalid", "true");
      const lines = Object.entries(fields).map(([name, messages]) => `${LABELS[name] || name}: ${messages.join(" ")}`);
      put(error, lines.length ? [h("p", {}, "Not saved:"), h("ul", {}, lines.map((line) => h("li", {}, line)))]
        : h("p", {}, `Not saved: ${errorText(problem)}`));
      error.hidden = false;
    }
  }
}
