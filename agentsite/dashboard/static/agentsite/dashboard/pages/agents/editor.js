// The agent editor (`#/agents/<id>`): its fields (slug, name, description, instructions, model, tools,
// knowledge, temperature, max tokens, up to 6 starters), saved with PATCH /api/agents/:id (each save that
// changes something is a version). A refused save shows each of the API's messages beside the field it names
// (`tools.2` on that tool's checkbox, `starters.1` on that starter). Owners and admins share and delete it
// (not the agent `default`); a viewer sees it read-only. Beside it: the "Try it" chat (trychat.js) and the
// version history (history.js).
import { confirmDialog, errorBox, errorText, field, fieldErrors, h, hint, loading, put } from "../../ui.js";
import { isDefault, MAX_STARTERS, ownerName, roleOf, SLUG_PATTERN, sharingText } from "./common.js";
import { HistoryPanel } from "./history.js";
import { CollectionPicker, ModelSelect, ToolPicker } from "./pickers.js";
import { TryChat } from "./trychat.js";

export async function mountAgentEditor(root, ctx, id) {
  const editor = new AgentEditor(root, ctx, id);
  await editor.start();
  return () => editor.stop();
}

class AgentEditor {
  constructor(root, ctx, id) {
    this.root = root;
    this.ctx = ctx;
    this.id = id;
    this.agent = null;
    this.stopped = false;
    this.boxes = {}; // field name -> {element, error, control}
    this.model = new ModelSelect({ ctx, id: "agent-model" });
    this.tools = new ToolPicker({ ctx });
    this.knowledge = new CollectionPicker({ ctx });
    this.tools.changed = () => this.dirty();
    this.knowledge.changed = () => this.dirty();
    this.history = new HistoryPanel(this);
    this.chat = new TryChat({ ctx, agent: () => this.agent });
  }

  stop() {
    this.stopped = true;
    this.chat.stop();
  }

  path(suffix = "") {
    return `/api/agents/${encodeURIComponent(this.id)}${suffix}`;
  }

  get role() {
    return roleOf(this.agent);
  }

  get readOnly() {
    return this.role === "viewer";
  }

  async start() {
    put(this.root, loading("Loading the agent…"));
    try {
      this.agent = await this.ctx.api(this.path());
    } catch (error) {
      put(this.root, h("p", {}, h("a", { href: "#/agents" }, "← All agents")),
        errorBox(error.status === 404 ? "There is no such agent (or it is not shared with you)."
          : `The agent could not be loaded: ${errorText(error)}`, error.status === 404 ? null : () => this.start()));
      return;
    }
    if (this.stopped) return;
    this.build();
    this.fill();
    await Promise.all([this.model.load(), this.tools.load(), this.knowledge.load(), this.history.load()]);
    this.form.dataset.ready = "true"; // every list is in (tests wait for it)
  }

  // --- layout -------------------------------------------------------------------------------------------

  build() {
    this.title = h("h1", { class: "agents-title" });
    this.meta = h("p", { class: "agents-meta muted" });
    this.actions = h("div", { class: "actions agents-head-actions" });
    this.status = h("p", { class: "agents-save-status", role: "status", "aria-live": "polite" });
    this.problem = h("div", { class: "form-error", role: "alert" });
    this.saveButton = h("button", { type: "submit", class: "primary" }, "Save");
    const input = (name, attrs = {}) => h("input", { name, autocomplete: "off", ...attrs });
    this.controls = {
      slug: input("slug", { maxlength: "64", pattern: SLUG_PATTERN, spellcheck: "false", autocapitalize: "none" }),
      name: input("name", { maxlength: "100" }),
      description: h("textarea", { name: "description", rows: "2", maxlength: "2000" }),
      instructions: h("textarea", { name: "instructions", rows: "8", maxlength: "20000", class: "agents-instructions" }),
      temperature: input("temperature", { type: "number", min: "0", max: "2", step: "0.1", inputmode: "decimal" }),
      max_tokens: input("max_tokens", { type: "number", min: "1", max: "1000000", step: "1", inputmode: "numeric" }),
    };
    this.starters = Array.from({ length: MAX_STARTERS }, (_, index) =>
      input(`starter-${index}`, { maxlength: "500", "aria-label": `Starter ${index + 1}` }));
    const box = (name, label, control, ...help) => this.box(name, field(label, control, ...help), control);
    this.starterErrors = this.starters.map(() => h("p", { class: "agent-field-error", role: "alert", hidden: true }));
    const startersBox = h("fieldset", { class: "agent-starters" }, h("legend", {}, "Starters"),
      hint(`Up to ${MAX_STARTERS} first messages the chat offers as buttons.`),
      this.starters.map((control, index) => h("div", { class: "agent-starter" }, control, this.starterErrors[index])));
    this.readOnlyNotice = h("p", { class: "notice", hidden: true },
      "You may use this agent; only its owner and its editors change it.");
    this.form = h("form", { class: "card agents-form", "aria-label": "Agent", novalidate: true,
      oninput: () => this.dirty(), onchange: () => this.dirty(),
      onsubmit: (event) => { event.preventDefault(); this.save(); } },
    this.readOnlyNotice,
    h("div", { class: "agents-row" },
      box("slug", "Slug", this.controls.slug, "Lowercase letters, digits, - and _; its model name is agent:<slug>."),
      box("name", "Name", this.controls.name)),
    box("description", "Description", this.controls.description),
    box("instructions", "Instructions", this.controls.instructions, "Sent as the first system message of every chat."),
    box("model", "Model", this.model.select),
    this.box("tools", this.tools.element, this.tools.element),
    this.box("knowledge", this.knowledge.element, this.knowledge.element),
    h("div", { class: "agents-row" },
      box("temperature", "Temperature", this.controls.temperature, "0 to 2."),
      box("max_tokens", "Max tokens", this.controls.max_tokens, "Of a reply.")),
    this.box("starters", startersBox, startersBox),
    this.problem,
    h("div", { class: "actions agents-save" }, this.saveButton, this.status));
    put(this.root,
      h("p", { class: "agents-back" }, h("a", { href: "#/agents" }, "← All agents")),
      h("header", { class: "agents-head" }, h("div", { class: "agents-head-text" }, this.title, this.meta), this.actions),
      h("div", { class: "agents-editor" },
        h("div", { class: "agents-main" }, this.form, this.history.element),
        h("aside", { class: "agents-aside", "aria-label": "Try it" }, this.chat.element)));
  }

  // A field's box with a place for its problems, linked to its control (aria-describedby).
  box(name, element, control) {
    const error = h("p", { class: "agent-field-error", role: "alert", id: `agent-${name}-error`, hidden: true });
    element.dataset.field = name;
    element.append(error);
    const described = control.getAttribute("aria-describedby");
    control.setAttribute("aria-describedby", [described, error.id].filter(Boolean).join(" "));
    this.boxes[name] = { element, error, control };
    return element;
  }

  // The agent as the server holds it, into the form and the header.
  fill() {
    const agent = this.agent;
    this.title.textContent = agent.name;
    this.title.title = agent.name;
    put(this.meta, h("code", {}, `agent:${agent.slug}`), isDefault(agent) ? h("span", { class: "badge ok" }, "default") : null,
      ` · Owner: ${ownerName(agent)} · Sharing: ${sharingText(agent)} · Your role: ${this.role} · Version ${agent.version}`);
    for (const name of ["slug", "name", "description", "instructions"]) this.controls[name].value = agent[name] ?? "";
    this.controls.temperature.value = String(agent.temperature);
    this.controls.max_tokens.value = String(agent.max_tokens);
    this.starters.forEach((input, index) => { input.value = agent.starters[index] ?? ""; });
    this.model.set(agent.model);
    this.tools.set(agent.tools);
    this.knowledge.set(agent.knowledge);
    this.setProblems({}, null);
    this.setReadOnly();
    put(this.actions,
      this.role === "owner" ? h("button", { type: "button", onclick: () => this.share() }, "Share") : null,
      this.role === "owner" && !isDefault(agent) ? h("button", { type: "button", class: "danger",
        onclick: () => this.remove() }, "Delete") : null);
    this.status.textContent = "";
    this.status.dataset.state = "saved";
    this.chat.agentChanged();
  }

  setReadOnly() {
    const readOnly = this.readOnly;
    this.readOnlyNotice.hidden = !readOnly;
    for (const control of [...Object.values(this.controls), ...this.starters]) {
      if (control.tagName === "SELECT") control.disabled = readOnly;
      else control.readOnly = readOnly;
    }
    this.controls.slug.readOnly = readOnly || isDefault(this.agent);
    this.model.select.disabled = readOnly;
    this.tools.setReadOnly(readOnly);
    this.knowledge.setReadOnly(readOnly);
    this.saveButton.hidden = readOnly;
    this.form.classList.toggle("read-only", readOnly);
  }

  dirty() {
    if (this.readOnly || !this.agent) return;
    this.status.textContent = "Changes not saved yet.";
    this.status.dataset.state = "unsaved";
  }

  // --- saving -------------------------------------------------------------------------------------------

  // The form as a PATCH body. A number field left empty (or not a number) goes as null: the API names it.
  body() {
    const number = (input) => (input.value.trim() === "" || Number.isNaN(Number(input.value)) ? null : Number(input.value));
    const starters = [];
    this.starterSlots = [];
    this.starters.forEach((input, index) => {
      if (input.value.trim()) {
        starters.push(input.value);
        this.starterSlots.push(index);
      }
    });
    const body = {
      name: this.controls.name.value.trim(),
      description: this.controls.description.value,
      instructions: this.controls.instructions.value,
      model: this.model.value(),
      tools: this.tools.value(),
      knowledge: this.knowledge.value(),
      temperature: number(this.controls.temperature),
      max_tokens: number(this.controls.max_tokens),
      starters,
    };
    if (!isDefault(this.agent)) body.slug = this.controls.slug.value.trim();
    return body;
  }

  async save() {
    if (this.readOnly) return;
    const body = this.body();
    this.saveButton.disabled = true;
    this.status.textContent = "Saving…";
    this.status.dataset.state = "saving";
    const before = this.agent.version;
    try {
      this.agent = await this.ctx.api(this.path(), { method: "PATCH", body });
    } catch (error) {
      this.status.textContent = "Not saved: fix the problems marked below.";
      this.status.dataset.state = "refused";
      this.setProblems(fieldErrors(error), body, error);
      return;
    } finally {
      this.saveButton.disabled = false;
    }
    this.fill();
    this.ctx.toast(this.agent.version === before ? "Nothing changed: no new version."
      : `Agent ${this.agent.name} saved as version ${this.agent.version}.`, "success");
    this.status.textContent = "All changes saved.";
    this.history.load();
  }

  // A refused save's problems, each beside the field it names; what names no field goes above Save.
  setProblems(problems, body, error) {
    for (const { element, error: slot, control } of Object.values(this.boxes)) {
      slot.hidden = true;
      slot.textContent = "";
      element.classList.remove("invalid");
      control.removeAttribute("aria-invalid");
    }
    for (const slot of this.starterErrors) {
      slot.hidden = true;
      slot.textContent = "";
    }
    for (const input of this.starters) input.removeAttribute("aria-invalid");
    const indexed = { tools: {}, knowledge: {} };
    const rest = [];
    for (const [key, messages] of Object.entries(problems)) {
      const [name, index] = key.split(".");
      if (index !== undefined && indexed[name]) {
        indexed[name][index] = messages;
        this.mark(name, null);
      } else if (name === "starters" && index !== undefined && this.starterSlots?.[Number(index)] !== undefined) {
        const slot = this.starterSlots[Number(index)];
        this.starterErrors[slot].textContent = messages.join(" ");
        this.starterErrors[slot].hidden = false;
        this.starters[slot].setAttribute("aria-invalid", "true");
        this.mark("starters", null);
      } else if (this.boxes[name]) {
        this.mark(name, messages.join(" "));
      } else {
        rest.push(`${key}: ${messages.join(" ")}`);
      }
    }
    this.tools.markProblems(indexed.tools, body?.tools || []);
    this.knowledge.markProblems(indexed.knowledge, body?.knowledge || []);
    const named = Object.keys(problems).length - rest.length;
    if (!error) this.problem.textContent = "";
    else if (!named) this.problem.textContent = errorText(error);
    else this.problem.textContent = rest.length ? rest.join(" ") : "The server refused the save: see the fields marked.";
    (this.form.querySelector('[aria-invalid="true"]') || this.problem).focus?.();
  }

  mark(name, message) {
    const box = this.boxes[name];
    box.element.classList.add("invalid");
    if (message) {
      box.error.textContent = message;
      box.error.hidden = false;
      box.control.setAttribute("aria-invalid", "true");
    }
  }

  // A restored version (history.js) is the agent now.
  restored(agent) {
    this.agent = agent;
    this.fill();
  }

  // --- share, delete --------------------------------------------------------------------------------------

  share() {
    this.ctx.share({ kind: "agent", path: this.path(), label: this.agent.name, transfer: !isDefault(this.agent),
      onChange: async () => {
        try {
          this.agent = await this.ctx.api(this.path());
          if (!this.stopped) this.fill();
        } catch (error) {
          if (error.status === 404) this.ctx.navigate("#/agents"); // handed over to someone else
        }
      } });
  }

  async remove() {
    if (!(await confirmDialog(`Delete the agent ${this.agent.name}? Its versions go with it.`, { confirmLabel: "Delete" }))) return;
    try {
      await this.ctx.api(this.path(), { method: "DELETE" });
      this.ctx.toast(`Agent ${this.agent.name} deleted.`, "success");
      this.ctx.navigate("#/agents");
    } catch (error) {
      this.ctx.toast(`Could not delete: ${errorText(error)}`, "error");
    }
  }
}
