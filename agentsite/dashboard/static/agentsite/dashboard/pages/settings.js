// Settings: your account (name, role, since when; change your password), and the agent's configuration
// (GET /api/config for everyone; only admins may change it, so others see it read-only). Saving sends the
// fields that changed (PATCH), so a save never rewrites what someone else changed meanwhile. Admins also
// manage the connections (pages/settings/connections.js) and the model aliases (pages/settings/aliases.js).
import { setTokens } from "../api.js";
import {
  checkbox, errorBox, errorText, field, fieldErrors, formatTime, h, hint, loading, pageHeader, put,
} from "../ui.js";
import { AliasesSection } from "./settings/aliases.js";
import { ConnectionsSection } from "./settings/connections.js";

export async function mount(root, ctx) {
  const page = new SettingsPage(root, ctx);
  await page.start();
  return () => { page.stopped = true; };
}

class SettingsPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.admin = Boolean(ctx.user?.is_admin);
    this.stopped = false;
    this.config = null;
    this.fields = []; // GET /api/meta's config_fields: the form, in its order, with how each is edited
    this.providers = []; // GET /api/meta's providers: the provider select's options
  }

  async start() {
    this.configBox = h("section", { class: "card settings-config", "aria-labelledby": "settings-config-title" });
    const models = this.admin ? this.modelSections() : null;
    put(this.root,
      pageHeader("Settings", null),
      h("div", { class: "settings-layout" }, this.accountSection(), this.configBox),
      models ? h("div", { class: "settings-models" }, models.map((section) => section.element)) : null);
    await Promise.all([this.loadConfig(), ...(models || []).map((section) => section.load())]);
  }

  // Connections and aliases (admins only): a change of a connection refreshes the aliases' choices.
  modelSections() {
    this.aliases = new AliasesSection({ ctx: this.ctx });
    this.connections = new ConnectionsSection({ ctx: this.ctx, onChange: () => {
      if (!this.stopped) this.aliases.load();
    } });
    return [this.connections, this.aliases];
  }

  // --- account ---------------------------------------------------------------------------------------

  accountSection() {
    const user = this.ctx.user || {};
    const error = h("div", { class: "form-error", role: "alert", hidden: true });
    const done = h("p", { class: "form-ok", role: "status" });
    const button = h("button", { type: "submit", class: "primary" }, "Change password");
    const form = h("form", { class: "settings-password", "aria-labelledby": "settings-password-title", novalidate: true,
      onsubmit: async (event) => {
        event.preventDefault();
        error.hidden = true;
        done.textContent = "";
        const elements = form.elements;
        for (const element of elements) element.removeAttribute?.("aria-invalid");
        if (elements.new_password.value !== elements.confirm_password.value) {
          elements.confirm_password.setAttribute("aria-invalid", "true");
          error.textContent = "The new password and its confirmation differ.";
          error.hidden = false;
          return;
        }
        button.disabled = true;
        try {
          const pair = await this.ctx.api("/api/auth/change-password", { method: "POST",
            body: { old_password: elements.old_password.value, new_password: elements.new_password.value } });
          form.reset();
          this.adoptTokens(pair, done);
        } catch (problem) {
          for (const name of Object.keys(fieldErrors(problem))) elements[name]?.setAttribute("aria-invalid", "true");
          error.textContent = errorText(problem);
          error.hidden = false;
        } finally {
          button.disabled = false;
        }
      } },
    h("h3", { id: "settings-password-title" }, "Change password"),
    field("Current password", h("input", { type: "password", name: "old_password", autocomplete: "current-password", required: true })),
    field("New password", h("input", { type: "password", name: "new_password", autocomplete: "new-password", required: true })),
    field("Confirm new password", h("input", { type: "password", name: "confirm_password", autocomplete: "new-password", required: true })),
    error, done, h("div", { class: "actions" }, button));
    return h("section", { class: "card settings-account", "aria-labelledby": "settings-account-title" },
      h("h2", { id: "settings-account-title" }, "Your account"),
      h("dl", { class: "facts" },
        h("dt", {}, "Username"), h("dd", { class: "account-username" }, user.username ?? ""),
        h("dt", {}, "Role"), h("dd", { class: "account-role" }, user.is_admin ? "Admin" : "User"),
        h("dt", {}, "Member since"), h("dd", {}, user.date_joined ? h("time", { datetime: user.date_joined }, formatTime(user.date_joined)) : "")),
      form);
  }

  // Every token issued before the change stops working: keep the session going with the new pair.
  adoptTokens(pair, done) {
    setTokens(pair);
    done.textContent = "Password changed. Your other sessions have been signed out.";
    this.ctx.toast("Password changed.", "success");
  }

  // --- agent config ----------------------------------------------------------------------------------

  async loadConfig() {
    const title = h("h2", { id: "settings-config-title" }, "Agent configuration");
    put(this.configBox, title, loading("Loading the configuration…"));
    let voices = [];
    try {
      const [config, voiceList, catalogue, meta] = await Promise.all([this.ctx.api("/api/config"),
        this.ctx.api("/api/voices").catch(() => ({ voices: [] })),
        this.ctx.api("/api/models").catch(() => ({ models: [] })), this.ctx.meta()]);
      this.config = config;
      this.fields = meta.config_fields;
      this.providers = meta.providers.map((provider) => [provider.name, provider.label]);
      voices = voiceList.voices || [];
      this.modelNames = (catalogue.models || []).map((entry) => entry.name);
    } catch (error) {
      if (!this.stopped) put(this.configBox, title, errorBox(`The configuration could not be loaded: ${errorText(error)}`, () => this.loadConfig()));
      return;
    }
    if (this.stopped) return;
    this.voices = voices;
    this.renderConfig();
  }

  renderConfig() {
    const title = h("h2", { id: "settings-config-title" }, "Agent configuration");
    this.configError = h("div", { class: "form-error", role: "alert", hidden: true });
    this.configOk = h("p", { class: "form-ok", role: "status" });
    // The config's connection (its provider, base URL and key): GET /api/config shows it to admins only.
    const controls = this.fields.filter((spec) => this.admin || !spec.connection).map((spec) => this.control(spec));
    const note = this.admin ? h("p", { class: "muted" }, "Changes apply to new chats and runs at once.")
      : h("p", { class: "notice", role: "note" }, "Only an admin can change the agent's configuration; this is what it is now.");
    const form = h("form", { class: "settings-config-form", novalidate: true, "aria-labelledby": "settings-config-title",
      onsubmit: (event) => { event.preventDefault(); this.saveConfig(form); } },
    h("fieldset", { disabled: !this.admin }, h("legend", { class: "visually-hidden" }, "Agent configuration"), ...controls),
    this.configError, this.configOk,
    this.admin ? h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Save configuration")) : null);
    // Public /v1 spends the operator's upstream key for anyone who can reach the server: said while it is on.
    const publicWarning = this.config.compat_auth === "public" ? h("p", { class: "notice warning settings-public-warning", role: "alert" },
      "The /v1 API is public: anyone who can reach this server can use the model, on your upstream API key. Choose Local or Key unless that is what you want.") : null;
    put(this.configBox, title, publicWarning, note, form,
      this.config.updated_at ? h("p", { class: "muted" }, "Last changed ", h("time", { datetime: this.config.updated_at }, formatTime(this.config.updated_at))) : null);
  }

  control(spec) {
    const value = this.config[spec.name];
    const help = spec.help ? hint(spec.help) : null;
    let input;
    switch (spec.kind) {
    case "provider":
    case "select": {
      const options = [...(spec.kind === "provider" ? this.providers : spec.options)];
      if (value && !options.some(([option]) => option === value)) options.push([value, value]);  // "token": the old name of "key"
      input = h("select", { name: spec.name }, ...options.map(([option, label]) => h("option", { value: option }, label)));
      input.value = value;
      break;
    }
    case "voice": {
      const options = this.voices.map((voice) => [voice.id, `${voice.name} (${voice.language}${voice.gender ? `, ${voice.gender}` : ""})`]);
      if (value && !options.some(([id]) => id === value)) options.unshift([value, value]);
      input = h("select", { name: spec.name }, ...options.map(([option, label]) => h("option", { value: option }, label)));
      input.value = value ?? "";
      break;
    }
    case "bool":
      return checkbox(spec.label, h("input", { type: "checkbox", name: spec.name, checked: Boolean(value) }));
    case "textarea":
      input = h("textarea", { name: spec.name, rows: "4" });
      input.value = value ?? "";
      break;
    case "list":
      input = h("textarea", { name: spec.name, rows: "3", spellcheck: "false", class: "mono" });
      input.value = (value || []).join("\n");
      break;
    case "secret":
      input = h("input", { type: "password", name: spec.name, autocomplete: "off",
        placeholder: this.config.api_key_set ? "A key is set: type to replace it" : "No key set" });
      return field(spec.label, input, hint(this.config.api_key_set ? "Set (never shown). Leave empty to keep it." : "Not set."),
        this.admin && this.config.api_key_set ? checkbox("Remove the key", h("input", { type: "checkbox", name: "api_key_clear" })) : null);
    case "number":
    case "integer":
      input = h("input", { type: "number", name: spec.name, min: String(spec.min), max: String(spec.max),
        step: spec.kind === "integer" ? "1" : String(spec.step), inputmode: spec.kind === "integer" ? "numeric" : "decimal" });
      input.value = value ?? "";
      break;
    case "model": {
      // Free text (a bare name of the default connection still works) with the catalogue's names offered.
      const list = h("datalist", { id: "settings-model-choices" }, ...(this.modelNames || []).map((name) => h("option", { value: name })));
      input = h("input", { type: "text", name: spec.name, list: "settings-model-choices", autocomplete: "off", spellcheck: "false" });
      input.value = value ?? "";
      const wrapper = field(spec.label, input, help);
      wrapper.append(list);
      return wrapper;
    }
    default:
      input = h("input", { type: spec.kind === "url" ? "url" : "text", name: spec.name, autocomplete: "off", spellcheck: "false" });
      input.value = value ?? "";
    }
    return field(spec.label, input, help);
  }

  // The fields whose value differs from the loaded config.
  changes(form) {
    const elements = form.elements;
    const changes = {};
    for (const spec of this.fields) {
      const element = elements[spec.name];
      if (!element) continue;
      let value;
      if (spec.kind === "bool") value = element.checked;
      else if (spec.kind === "number") value = element.value === "" ? NaN : Number(element.value);
      else if (spec.kind === "integer") value = element.value === "" ? NaN : Number(element.value);
      else if (spec.kind === "list") value = element.value.split("\n").map((line) => line.trim()).filter(Boolean);
      else if (spec.kind === "secret") {
        if (elements.api_key_clear?.checked) changes.api_key = "";
        else if (element.value.trim()) changes.api_key = element.value.trim();
        continue;
      } else value = element.value;
      if (JSON.stringify(value) !== JSON.stringify(this.config[spec.name])) changes[spec.name] = Number.isNaN(value) ? element.value : value;
    }
    return changes;
  }

  async saveConfig(form) {
    this.configError.hidden = true;
    this.configOk.textContent = "";
    for (const element of form.elements) element.removeAttribute?.("aria-invalid");
    const changes = this.changes(form);
    if (!Object.keys(changes).length) {
      this.configOk.textContent = "Nothing to save: no field changed.";
      return;
    }
    try {
      this.config = await this.ctx.api("/api/config", { method: "PATCH", body: changes });
      this.renderConfig();
      const names = Object.keys(changes).map((name) => this.fields.find((spec) => spec.name === name)?.label || name);
      this.configOk.textContent = `Saved: ${names.join(", ")}.`;
      this.ctx.toast("Configuration saved.", "success");
    } catch (error) {
      const fields = fieldErrors(error);
      for (const name of Object.keys(fields)) form.elements[name]?.setAttribute("aria-invalid", "true");
      const labelled = Object.entries(fields).filter(([name]) => name !== "allowed" && name !== "fields")
        .map(([name, messages]) => `${this.fields.find((spec) => spec.name === name)?.label || name}: ${messages.join(" ")}`);
      // The fields' own messages say it all when there are some; else the envelope's message (and, for an
      // unknown field, which ones).
      put(this.configError, labelled.length ? [h("p", {}, "Not saved:"), h("ul", {}, ...labelled.map((line) => h("li", {}, line)))]
        : h("p", {}, `Not saved: ${errorText(error)}`));
      this.configError.hidden = false;
    }
  }
}
