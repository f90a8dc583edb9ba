// Agents: `#/agents` lists the agents the user may use (GET /api/agents: name, slug, owner, sharing, the
// user's role; the deployment's agent `default` marked), each with its A2A URL and card (pages/agents/a2a.js),
// with New agent; `#/agents/<id>` is the editor (pages/agents/editor.js) with its version history and a "Try it"
// chat beside it.
import { listAll } from "../api.js";
import { confirmDialog, errorBox, errorText, field, h, hint, loading, pageHeader, put } from "../ui.js";
import { a2aPanel } from "./agents/a2a.js";
import { ownerName, SLUG_PATTERN, sharingText } from "./agents/common.js";
import { mountAgentEditor } from "./agents/editor.js";

export async function mount(root, ctx) {
  const [id] = ctx.route || [];
  if (id) return mountAgentEditor(root, ctx, id);
  const page = new AgentList(root, ctx);
  await page.start();
  return () => { page.stopped = true; };
}

// Who may call an agent's A2A URL: what other agents (A2A clients) need to be let in.
function a2aNote() {
  return h("section", { class: "card agents-a2a-note", "aria-labelledby": "agents-a2a-title" },
    h("h2", { id: "agents-a2a-title" }, "Call your agents over A2A"),
    h("p", {}, "Each agent is also an A2A (Agent2Agent) agent at its A2A URL, and its card says what it does. "
      + "Another agent calls it as you with an API key that has the a2a scope (",
    h("a", { href: "#/keys" }, "Keys"), "), or through OAuth: the client asks you to sign in here and allow it, "
      + "then shows under Keys → Connected apps."));
}

class AgentList {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.stopped = false;
  }

  async start() {
    this.listBox = h("section", { class: "agents-list", "aria-labelledby": "agents-list-title" });
    this.createError = h("div", { class: "form-error", role: "alert" });
    const create = h("form", { class: "card agents-create", "aria-labelledby": "agents-create-title", novalidate: true,
      onsubmit: (event) => { event.preventDefault(); this.create(event.currentTarget); } },
    h("h2", { id: "agents-create-title" }, "New agent"),
    field("Slug", h("input", { name: "slug", required: true, maxlength: "64", pattern: SLUG_PATTERN, autocomplete: "off",
      spellcheck: "false", autocapitalize: "none" }), hint("1-64 lowercase letters, digits, - or _; unique. Its model name is agent:<slug>.")),
    field("Name", h("input", { name: "name", required: true, maxlength: "100", autocomplete: "off" })),
    this.createError,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Create agent")));
    put(this.root,
      pageHeader("Agents", "Named agents, each with its own instructions, model, tools and knowledge; shared like collections."),
      h("div", { class: "agents-layout" }, this.listBox, h("div", { class: "agents-side" }, create, a2aNote())));
    await this.load();
  }

  async load() {
    const title = () => h("h2", { id: "agents-list-title" }, "All agents");
    put(this.listBox, title(), loading("Loading agents…"));
    let agents;
    try {
      agents = await listAll("/api/agents?limit=200", { max: 2000 });
    } catch (error) {
      if (!this.stopped) {
        put(this.listBox, title(), errorBox(`The agents could not be loaded: ${errorText(error)}`, () => this.load()));
      }
      return;
    }
    if (this.stopped) return;
    if (!agents.length) {
      put(this.listBox, title(), h("p", { class: "empty" }, "No agents yet: create one."));
      return;
    }
    put(this.listBox, title(), h("ul", { class: "agents-items" }, agents.map((agent) => this.item(agent))));
  }

  item(agent) {
    const isDefault = agent.owner === null;
    const role = agent.access?.role || "viewer";
    return h("li", { class: "card agents-item", dataset: { agentSlug: agent.slug, agentId: String(agent.id) } },
      h("div", { class: "agents-item-main" },
        h("a", { href: `#/agents/${agent.id}`, class: "agents-item-name" }, agent.name),
        isDefault ? h("span", { class: "badge ok", title: "The deployment's agent: chats use it unless they name another" }, "default") : null,
        h("p", { class: "agents-item-slug" }, h("code", {}, `agent:${agent.slug}`)),
        agent.description ? h("p", { class: "muted agents-item-description" }, agent.description) : null,
        h("p", { class: "agents-item-meta muted" },
          h("span", { class: "agents-owner" }, `Owner: ${ownerName(agent)}`), " · ",
          h("span", { class: "agents-sharing" }, `Sharing: ${sharingText(agent)}`), " · ",
          h("span", { class: "agents-role" }, `Your role: ${role}`))),
      h("div", { class: "actions" },
        role === "owner" ? h("button", { type: "button", "aria-label": `Share ${agent.name}`,
          onclick: () => this.ctx.share({ kind: "agent", path: `/api/agents/${agent.id}`, label: agent.name,
            transfer: !isDefault, onChange: () => this.load() }) }, "Share") : null,
        role === "owner" && !isDefault ? h("button", { type: "button", class: "danger", "aria-label": `Delete ${agent.name}`,
          onclick: () => this.remove(agent) }, "Delete") : null),
      a2aPanel(agent, this.ctx));
  }

  async create(form) {
    this.createError.textContent = "";
    const slug = form.elements.slug;
    const name = form.elements.name;
    for (const input of [slug, name]) input.removeAttribute("aria-invalid");
    try {
      const agent = await this.ctx.api("/api/agents", { method: "POST",
        body: { slug: slug.value.trim(), name: name.value.trim() || slug.value.trim() } });
      this.ctx.toast(`Agent ${agent.name} created.`, "success");
      this.ctx.navigate(`#/agents/${agent.id}`);
    } catch (error) {
      const details = error.details || {};
      if (details.slug || !details.name) slug.setAttribute("aria-invalid", "true");
      if (details.name) name.setAttribute("aria-invalid", "true");
      this.createError.textContent = errorText(error);
      (details.name ? name : slug).focus();
    }
  }

  async remove(agent) {
    if (!(await confirmDialog(`Delete the agent ${agent.name}? Its versions go with it.`,
      { confirmLabel: "Delete" }))) return;
    try {
      await this.ctx.api(`/api/agents/${agent.id}`, { method: "DELETE" });
      this.ctx.toast(`Agent ${agent.name} deleted.`, "success");
      await this.load();
    } catch (error) {
      this.ctx.toast(`Could not delete ${agent.name}: ${errorText(error)}`, "error");
    }
  }
}
