// "Try it": a chat with the agent beside its editor. The first message makes a chat session with the agent
// (POST /api/sessions {name, agent: <slug>}, listed on the Chat page like any other); each message streams
// its reply from POST /api/sessions/:id/chat, shown as the Chat page shows messages (chat/message.js). It
// talks to the agent as saved; "New conversation" starts again, as does saving a new slug. An empty
// conversation offers the agent's starters as buttons that send them.
import { errorText, h, put } from "../../ui.js";
import { MessageView, Uploads } from "../chat/message.js";
import { Reader } from "../chat/voice.js";

const NAME_LENGTH = 200;

export class TryChat {
  // options: ctx (the page's), agent() -> the agent as saved.
  constructor({ ctx, agent }) {
    this.ctx = ctx;
    this.agent = agent;
    this.sessionId = null;
    this.slug = null;
    this.streaming = null;
    this.reader = null;
    this.uploads = new Uploads(ctx.api);
    this.hooks = { uploads: this.uploads, readAloud: (view, button) => this.readAloud(view, button),
      scrollDown: () => { this.log.scrollTop = this.log.scrollHeight; } };
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
    this.reader?.stop();
    this.uploads.revokeAll();
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
      const mine = new MessageView("user", this.hooks);
      mine.setContent(text);
      this.log.append(mine.element);
      this.input.value = "";
      const reply = new MessageView("assistant", this.hooks);
      reply.setWaiting();
      this.log.append(reply.element);
      this.hooks.scrollDown();
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
        onEvent: ({ event, data }) => { reply.onEvent(event, data); this.hooks.scrollDown(); } });
      if (!reply.finished) reply.fail("The reply ended before it was finished.");
    } catch (error) {
      if (controller.signal.aborted) {
        reply.setStatus("interrupted");
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

  // A reply's "Read aloud", as on the Chat page (the voice provider of /api/config).
  async readAloud(view, button) {
    if (this.reader) {
      this.reader.stop();
      this.reader = null;
      button.textContent = "Read aloud";
      return;
    }
    const config = await this.ctx.api("/api/config").catch(() => ({}));
    const reader = new Reader({ api: this.ctx.api, provider: config.tts_provider, voice: config.tts_voice });
    this.reader = reader;
    button.textContent = "Stop reading";
    const done = () => {
      if (this.reader === reader) this.reader = null;
      button.textContent = "Read aloud";
    };
    try {
      await reader.speak(view.text(), done, (error) => { done(); this.error.textContent = `Read-aloud failed: ${error.message}`; });
    } catch (error) {
      done();
      this.error.textContent = `Read-aloud failed: ${errorText(error)}`;
    }
  }
}
