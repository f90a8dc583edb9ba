// The chat header's agent picker: which agent the chat talks to (the session's `agent`, a slug; `default` when
// it names none). The choices are the agents the user may use (GET /api/agents). A chat has its agent for good:
// choosing another starts a new chat with it (the page's onChoose); on a chat not started yet it is kept for
// the POST that creates it. The chosen agent's starters are what an empty chat offers.
import { listAll } from "../../api.js";
import { errorText, h, put } from "../../ui.js";

export const DEFAULT_AGENT = "default";

export class AgentPicker {
  // options: onChoose(slug) when the user picks an agent.
  constructor({ onChoose }) {
    this.onChoose = onChoose;
    this.value = DEFAULT_AGENT;
    this.agents = null;
    this.error = null;
    this.select = h("select", { id: "chat-agent", class: "chat-agent", "aria-label": "Agent",
      onchange: () => { this.value = this.select.value; this.onChoose(this.value); } });
    this.element = h("div", { class: "chat-agent-picker" }, this.select);
    this.render();
  }

  async load() {
    try {
      this.agents = await listAll("/api/agents?limit=200", { max: 2000 });
    } catch (error) {
      this.agents = [];
      this.error = errorText(error);
    }
    this.render();
  }

  // The chat shown changed: show its agent.
  show(slug) {
    this.value = slug || DEFAULT_AGENT;
    this.render();
  }

  // The chosen agent's record (null while the list loads, or for an agent no longer listed).
  current() {
    return (this.agents || []).find((agent) => agent.slug === this.value) || null;
  }

  // For the POST that creates a chat: the agent to name (null for the default, which needs no naming).
  pending() {
    return this.value === DEFAULT_AGENT ? null : this.value;
  }

  render() {
    const agents = this.agents || [];
    const known = agents.some((agent) => agent.slug === this.value);
    const label = (agent) => (agent.name === agent.slug ? agent.name : `${agent.name} (${agent.slug})`);
    put(this.select,
      known ? null : h("option", { value: this.value }, this.value === DEFAULT_AGENT ? "Default agent"
        : `${this.value} (not available)`),
      agents.map((agent) => h("option", { value: agent.slug }, label(agent))));
    this.select.value = this.value;
    this.select.title = this.error ? `The agents could not be listed: ${this.error}` : "The agent this chat talks to";
  }
}
