// "Try it": a chat with the agent beside its editor. The first message makes a chat session with the agent
// (POST /api/sessions {name, agent: <slug>}, listed on the Chat page like any other); each message streams
// its reply from POST /api/sessions/:id/chat (its events as docs/api.md says: delta, tool_call, tool_result,
// done, error), drawn as the Chat page draws messages (chat.css, which agents.css imports). It talks to the
// agent as saved; "New conversation" starts again, as does saving a new slug. An empty
// conversation offers the agent's starters as buttons that send them.
import { errorText, h, put, renderMarkdown } from "../../ui.js";

const NAME_LENGTH = 200;

export class TryChat {
  // options: ctx (the page's), agent() -> the agent as saved.
  constructor({ ctx, agent }) {
    this.ctx = ctx;
    this.agent = agent;
    this.sessionId = null;
    this.slug = null;
    this.streaming = null;
    this.element = this.build();
  }

  build() {
    this.log = h("div", { class: "chat-log agents-try-log", role: "log", "aria-label": "Try-it conversation",
      "aria-live": "polite", tabindex: "0" });
    this.input = h("textarea", { id: "agents-try-message", rows: "2", placeholder: "Ask the agent… (Enter sends)",
      onkeydown: (event) => {
        if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
          event.preventDefault();
          this.send(this.input.value);
        }
      } });
    this.error = h("div", { class: "form-error", role: "alert" });
    this.sendButton = h("button", { type: "submit", class: "primary" }, "Send");
    this.stopButton = h("button", { type: "button", class: "danger", hidden: true, onclick: () => this.streaming?.abort() }, "Stop");
    return h("section", { class: "card agents-try", "aria-labelledby": "agents-try-title" },
      h("div", { class: "agents-try-head" }, h("h2", { id: "agents-try-title" }, "Try it"),
        h("button", { type: "button", class: "small", onclick: () => this.reset() }, "New conversation")),
      h("p", { class: "hint" }, "Talks to the agent as saved: save your changes first."),
      this.log,
      h("form", { class: "agents-try-composer", novalidate: true,
        onsubmit: (event) => { event.preventDefault(); this.send(this.input.value); } },
      h("label", { for: this.input.id }, "Message to the agent"), this.input, this.error,
      h("div", { class: "actions" }, this.stopButton, this.sendButton)));
  }

  stop() {
    this.streaming?.abort();
  }

  scrollDown() {
    this.log.scrollTop = this.log.scrollHeight;
  }

  // The agent was loaded or saved: a new slug starts a new conversation; an empty one shows the starters again.
  agentChanged() {
    const slug = this.agent()?.slug;
    if (slug !== this.slug) {
      this.slug = slug;
      this.reset();
    } else if (!this.log.querySelector(".message")) {
      this.showEmpty();
    }
  }

  reset() {
    this.streaming?.abort();
    this.streaming = null;
    this.sessionId = null;
    this.showEmpty();
  }

  showEmpty() {
    const starters = this.agent()?.starters || [];
    put(this.log, h("div", { class: "chat-empty agents-try-empty" },
      h("p", { class: "empty" }, "Send a message to try the agent."),
      starters.length ? h("div", { class: "chat-starters", role: "group", "aria-label": "Starters" },
        starters.map((text) => h("button", { type: "button", class: "chat-starter", title: text,
          onclick: () => this.send(text) }, text))) : null));
  }

  async send(text) {
    if (this.streaming) return;
    if (!text.trim()) {
      this.error.textContent = "Write a message first.";
      this.input.focus();
      return;
    }
    this.error.textContent = "";
    const controller = new AbortController();
    this.streaming = controller;
    this.setBusy(true);
    try {
      if (!this.sessionId) await this.createSession();
      if (controller.signal.aborted) return;
      this.log.querySelector(".agents-try-empty")?.remove();
      this.log.append(new TryMessage("user", text).element);
      this.input.value = "";
      const reply = new TryMessage("assistant", "");
      this.log.append(reply.element);
      this.scrollDown();
      await this.stream(text, controller, reply);
    } catch (error) {
      if (!controller.signal.aborted) this.error.textContent = `Not sent: ${errorText(error)}`;
    } finally {
      if (this.streaming === controller) this.streaming = null;
      this.setBusy(false);
    }
  }

  async createSession() {
    const agent = this.agent();
    const session = await this.ctx.api("/api/sessions", { method: "POST",
      body: { name: `Try ${agent.name}`.slice(0, NAME_LENGTH), agent: agent.slug } });
    this.sessionId = session.id;
  }

  async stream(text, controller, reply) {
    try {
      await this.ctx.stream(`/api/sessions/${encodeURIComponent(this.sessionId)}/chat`, {
        body: { message: text }, signal: controller.signal,
        onEvent: ({ event, data }) => { reply.onEvent(event, data); this.scrollDown(); } });
      if (!reply.finished) reply.fail("The reply ended before it was finished.");
    } catch (error) {
      if (controller.signal.aborted) {
        reply.finish("interrupted", "Stopped before the reply was finished.");
        return;
      }
      reply.fail(errorText(error));
    }
  }

  setBusy(busy) {
    this.log.setAttribute("aria-busy", String(busy));
    this.sendButton.disabled = busy;
    this.stopButton.hidden = !busy;
  }
}

// One message of the Try-it conversation: its Markdown (sanitised by renderMarkdown), the tools it called
// (folded), and how it ended. Classes as the Chat page's messages (chat.css).
class TryMessage {
  constructor(role, text) {
    this.content = text;
    this.finished = false;
    this.body = h("div", { class: "message-body markdown" });
    this.calls = new Map();
    this.extras = h("div", { class: "message-extras" });
    this.statusLine = h("p", { class: "message-status" });
    this.element = h("article", { class: `message message-${role}`, "aria-label": role === "user" ? "You said" : "The agent said" },
      h("p", { class: "message-role" }, role === "user" ? "You" : "Agent"), this.body, this.extras, this.statusLine);
    if (role === "user" || text) this.render();
    else put(this.body, h("span", { class: "typing" }, h("span", { class: "spinner", "aria-hidden": "true" }), " Thinking…"));
  }

  render() {
    put(this.body, renderMarkdown(this.content));
  }

  onEvent(event, data) {
    if (event === "delta") {
      this.content += data?.content ?? "";
      this.render();
    } else if (event === "tool_call") {
      const result = h("pre", { class: "tool-result muted" }, "Running…");
      this.calls.set(data.id, result);
      this.extras.append(h("details", { class: "tool-call" }, h("summary", {}, "Tool call: ", h("code", {}, data.name || "tool")),
        h("pre", {}, typeof data.arguments === "string" ? data.arguments : JSON.stringify(data.arguments ?? {}, null, 2)), result));
    } else if (event === "tool_result") {
      const result = this.calls.get(data.id);
      if (result) {
        result.textContent = String(data.content ?? "");
        result.className = `tool-result${data.is_error ? " error" : ""}`;
      }
    } else if (event === "done") {
      if (typeof data?.content === "string") this.content = data.content;
      this.render();
      this.finish("complete");
    } else if (event === "error") {
      this.fail(data?.message || "The reply failed.");
    }
  }

  finish(status, note) {
    this.finished = true;
    this.element.dataset.status = status;
    if (note) put(this.statusLine, h("span", { class: "badge warning" }, "Interrupted"), ` ${note}`);
  }

  fail(message) {
    if (!this.content) put(this.body);
    this.finish("error");
    put(this.statusLine, h("span", { class: "badge error" }, "Error"), ` ${message}`);
    this.statusLine.setAttribute("role", "alert");
  }
}
