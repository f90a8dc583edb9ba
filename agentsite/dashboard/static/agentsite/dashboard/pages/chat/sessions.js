// The chat list: New chat, and every chat of the user, latest first, each a link with Rename and Delete. On
// a phone it folds behind the "Chats" button (`toggleButton`, placed in the conversation's header).
import { listAll } from "../../api.js";
import { confirmDialog, errorBox, formatTime, h, loading } from "../../ui.js";
import { SessionSearch } from "./search.js";

// options: ctx (the page's), current() -> the id of the chat shown (or null), onCurrent(session) when the
// list has the shown chat's record (its name, after a rename too), onNew() for the New chat button (the page
// opens the new chat itself: see ChatPage.newChat).
export class SessionList {
  constructor({ ctx, current, onCurrent, onNew }) {
    Object.assign(this, { ctx, current, onCurrent, onNew });
    this.sessions = [];
    this.stopped = false;
    this.toggleButton = h("button", { type: "button", class: "chat-list-toggle", "aria-expanded": "false",
      "aria-controls": "chat-sessions", onclick: () => this.toggle() }, "Chats");
    this.list = h("ul", { class: "session-list" });
    this.state = h("div", { class: "session-state" }, loading("Loading chats…"));
    this.search = new SessionSearch({ ctx, list: this.list, current });
    this.element = h("nav", { id: "chat-sessions", class: "chat-sessions", "aria-label": "Chats" },
      h("button", { type: "button", class: "primary new-chat", onclick: () => this.onNew() }, "New chat"),
      this.search.element, this.state, this.list, this.search.panel);
    if (!current()) this.element.classList.add("open");
  }

  stop() {
    this.stopped = true;
  }

  toggle(open) {
    const show = open ?? !this.element.classList.contains("open");
    this.element.classList.toggle("open", show);
    this.toggleButton.setAttribute("aria-expanded", String(show));
  }

  async load() {
    try {
      this.sessions = await listAll("/api/sessions?limit=200", { max: 1000 });
      if (this.stopped) return;
      this.state.replaceChildren(this.sessions.length ? "" : h("p", { class: "empty" }, "No chats yet."));
      this.render();
    } catch (error) {
      if (this.stopped) return;
      this.state.replaceChildren(errorBox(`The chats could not be loaded: ${error.message}`, () => this.load()));
    }
  }

  render() {
    this.sessions.sort((a, b) => String(b.updated_at).localeCompare(String(a.updated_at))); // latest first
    this.list.replaceChildren(...this.sessions.map((session) => this.item(session)));
    const current = this.sessions.find((session) => session.id === this.current());
    if (current) this.onCurrent(current);
  }

  item(session) {
    const link = h("a", { href: `#/chat/${encodeURIComponent(session.id)}`, class: "session-link",
      "aria-current": session.id === this.current() ? "page" : null },
    h("span", { class: "session-name", title: session.name }, session.name),
    h("span", { class: "session-meta" }, `${session.message_count} messages · ${formatTime(session.updated_at)}`));
    const item = h("li", { class: "session", "data-session-id": session.id }, link,
      h("div", { class: "session-actions" },
        h("button", { type: "button", class: "small", "aria-label": `Rename ${session.name}`,
          onclick: () => this.renameForm(item, session) }, "Rename"),
        h("button", { type: "button", class: "small danger", "aria-label": `Delete ${session.name}`,
          onclick: () => this.remove(session) }, "Delete")));
    return item;
  }

  renameForm(item, session) {
    const input = h("input", { value: session.name, maxlength: "200", required: true, "aria-label": "Chat name" });
    const problem = h("div", { class: "form-error", role: "alert" });
    const cancel = () => item.replaceWith(this.item(session));
    const form = h("form", { class: "session-rename", onsubmit: async (event) => {
      event.preventDefault();
      const name = input.value.trim();
      if (!name) { problem.textContent = "A chat needs a name."; return; }
      try {
        const renamed = await this.ctx.api(`/api/sessions/${session.id}/rename`, { method: "PUT", body: { name } });
        Object.assign(session, renamed);
        this.render();
        this.list.querySelector(`[data-session-id="${CSS.escape(session.id)}"] .session-link`)?.focus();
        this.ctx.toast("Chat renamed.", "success");
      } catch (error) {
        problem.textContent = error.message;
      }
    } },
    input, problem,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "small primary" }, "Save"),
      h("button", { type: "button", class: "small", onclick: cancel }, "Cancel")));
    input.addEventListener("keydown", (event) => { if (event.key === "Escape") cancel(); });
    item.replaceChildren(form);
    input.focus();
    input.select();
  }

  async remove(session) {
    if (!(await confirmDialog(`Delete the chat "${session.name}" and its messages?`, { confirmLabel: "Delete" }))) return;
    try {
      await this.ctx.api(`/api/sessions/${session.id}`, { method: "DELETE" });
      this.ctx.toast("Chat deleted.", "success");
      if (session.id === this.current()) {
        this.ctx.navigate("#/chat");
        return;
      }
      this.sessions = this.sessions.filter((other) => other.id !== session.id);
      this.render();
      this.element.querySelector(".new-chat").focus();
    } catch (error) {
      this.ctx.toast(`The chat could not be deleted: ${error.message}`, "error");
    }
  }
}
