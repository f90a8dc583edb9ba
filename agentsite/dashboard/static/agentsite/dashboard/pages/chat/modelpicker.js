// The chat header's model picker: which model the chat's turns use (the session's `model`). The choices come
// from GET /api/models (aliases first, then `<connection>/<model>` entries, with their state); "Default" is
// the agent's own model (an empty `model`). Choosing one in a chat saves it at once (PATCH /api/sessions/:id);
// in a chat not started yet it is kept for the POST that creates it.
import { errorText, h } from "../../ui.js";

export class ModelPicker {
  // options: ctx (the page's), sessionId() -> the chat shown (or null).
  constructor({ ctx, sessionId }) {
    Object.assign(this, { ctx, sessionId });
    this.value = ""; // the chat's model as stored (or chosen for a chat not yet created)
    this.catalogue = null;
    this.select = h("select", { id: "chat-model", class: "chat-model", "aria-label": "Model",
      onchange: () => this.choose(this.select.value) });
    this.element = h("div", { class: "chat-model-picker" }, this.select);
    this.render();
  }

  // The catalogue; a failure leaves the picker with the chat's own model and the default.
  async load() {
    try {
      this.catalogue = await this.ctx.api("/api/models");
    } catch (error) {
      this.catalogue = { default: "", models: [], error: errorText(error) };
    }
    this.render();
  }

  // The chat shown changed (or was reloaded): show its model.
  show(model) {
    this.value = model || "";
    this.render();
  }

  render() {
    const catalogue = this.catalogue || { default: "", models: [] };
    const usable = catalogue.models.filter((entry) => entry.state !== "discovery_failed");
    const option = (entry) => h("option", { value: entry.name },
      entry.state === "ok" ? entry.name : `${entry.name} (${entry.state.replace("_", " ")})`);
    const aliases = usable.filter((entry) => entry.kind === "alias");
    const models = usable.filter((entry) => entry.kind !== "alias");
    const known = usable.some((entry) => entry.name === this.value);
    this.select.replaceChildren(
      h("option", { value: "" }, catalogue.default ? `Default (${catalogue.default})` : "Default"),
      this.value && !known ? h("option", { value: this.value }, `${this.value} (not available)`) : null,
      aliases.length ? h("optgroup", { label: "Aliases" }, aliases.map(option)) : null,
      models.length ? h("optgroup", { label: "Models" }, models.map(option)) : null,
    );
    this.select.value = this.value;
    this.select.title = catalogue.error ? `The models could not be listed: ${catalogue.error}` : "The model this chat uses";
  }

  async choose(model) {
    const id = this.sessionId();
    if (!id) {
      this.value = model;
      return;
    }
    this.select.disabled = true;
    try {
      const session = await this.ctx.api(`/api/sessions/${encodeURIComponent(id)}`, { method: "PATCH", body: { model } });
      this.value = session.model;
      this.ctx.toast(model ? `This chat now uses ${model}.` : "This chat now uses the default model.", "success");
    } catch (error) {
      this.ctx.toast(`The model was not changed: ${errorText(error)}`, "error");
    } finally {
      this.select.disabled = false;
      this.render();
    }
  }

  // For the POST that creates a chat started from #/chat.
  pending() {
    return this.value;
  }
}
