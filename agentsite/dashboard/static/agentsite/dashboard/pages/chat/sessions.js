// The chat list: New chat, a toolbar, and the user's chats: the pinned ones in a "Pinned" group first, then
// the others, latest first, each a link with Pin (a toggle), Archive, Rename and Delete. The toolbar's "Archived" switch
// shows the archived chats instead (Unarchive, Rename, Delete). On a phone the list folds behind the "Chats"
// button (`toggleButton`, placed in the conversation's header).
//
// What other parts of the page may hook in (a few lines each): `toolbar` (an element above the list to append
// controls to, e.g. a search box), `params` (extra query parameters of GET /api/sessions, e.g. {q}; call load()
// after changing them), `itemActions` (functions (session) -> a button or null, added to each chat's actions),
// and load() (reads the list again, e.g. after an import).
import { listAll } from "../../api.js";
import { confirmDialog, errorBox, formatTime, h, loading } from "../../ui.js";
import { Drafts } from "./drafts.js";
import { SessionSearch } from "./search.js";

// Pinned first, then the most recently updated: the order GET /api/sessions answers in, kept after a change
// made here.
function pinnedThenLatest(a, b) {
  return Number(Boolean(b.pinned)) - Number(Boolean(a.pinned)) || String(b.updated_at).localeCompare(String(a.updated_at));
}

// options: ctx (the page's), current() -> the id of the chat shown (or null), onCurrent(session) when the
// list has the shown chat's record (its name, after a rename too; asked for on its own when the chat is not
// in the list shown, e.g. an archived chat), onNew() for the New chat button (the page opens the new chat
// itself: see ChatPage.newChat).
export class SessionList {
  constructor({ ctx, current, onCurrent, onNew }) {
    Object.assign(this, { ctx, current, onCurrent, onNew });
    this.sessions = [];
    this.archived = false; // which view: the archived chats, or the others
    this.params = {};
    this.itemActions = [];
    this.stopped = false;
    this.loads = 0; // counts load() calls: only the latest one's answer is shown
    this.shown = null; // the record of the chat shown when it is not in the list (see showCurrent)
    this.drafts = new Drafts(ctx.user);
    this.toggleButton = h("button", { type: "button", class: "chat-list-toggle", "aria-expanded": "false",
      "aria-controls": "chat-sessions", onclick: () => this.toggle() }, "Chats");
    this.archivedButton = h("button", { type: "button", class: "small session-view", "aria-pressed": "false",
      onclick: () => this.showArchived(!this.archived) }, "Archived");
    this.toolbar = h("div", { class: "session-toolbar" }, this.archivedButton);
    this.note = h("div", { class: "session-note" });
    this.list = h("div", { class: "session-groups" });
    this.state = h("div", { class: "session-state" }, loading("Loading chats…"));
    this.search = new SessionSearch({ ctx, list: this.list, current });
    this.element = h("nav", { id: "chat-sessions", class: "chat-sessions", "aria-label": "Chats" },
      h("button", { type: "button", class: "primary new-chat", onclick: () => this.onNew() }, "New chat"),
      this.search.element, this.toolbar, this.note, this.state, this.list, this.search.panel);
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

  // The archived chats (on) or the others.
  showArchived(on) {
    this.archived = on;
    this.archivedButton.setAttribute("aria-pressed", String(on));
    this.sessions = [];
    this.list.replaceChildren();
    this.state.replaceChildren(loading(on ? "Loading archived chats…" : "Loading chats…"));
    return this.load();
  }

  async load() {
    const ticket = ++this.loads;
    const query = new URLSearchParams({ limit: "200" });
    for (const [name, value] of Object.entries(this.params)) if (value) query.set(name, value);
    if (this.archived) query.set("archived", "true");
    try {
      const sessions = await listAll(`/api/sessions?${query}`, { max: 1000 });
      if (this.stopped || ticket !== this.loads) return;
      this.sessions = sessions;
      this.render();
    } catch (error) {
      if (this.stopped || ticket !== this.loads) return;
      this.state.replaceChildren(errorBox(`The chats could not be loaded: ${error.message}`, () => this.load()));
    }
  }

  render() {
    this.sessions.sort(pinnedThenLatest);
    const pinned = this.archived ? [] : this.sessions.filter((session) => session.pinned);
    const others = this.sessions.filter((session) => !pinned.includes(session));
    const empty = this.archived ? "No archived chats." : "No chats yet.";
    this.state.replaceChildren(...(this.sessions.length ? [] : [h("p", { class: "empty" }, empty)]));
    const groups = [pinned.length ? this.group("Pinned", pinned) : null,
      others.length ? this.group(this.archived ? "Archived" : pinned.length ? "Chats" : null, others) : null];
    this.list.replaceChildren(...groups.filter(Boolean));
    this.showCurrent();
  }

  // One group of chats: a heading when there is more than one group (or in the archived view), and the list.
  group(title, sessions) {
    return h("section", { class: "session-group" },
      title ? h("h2", { class: "session-group-title" }, title) : null,
      h("ul", { class: "session-list", "aria-label": title || "Chats" }, sessions.map((session) => this.item(session))));
  }

  // The shown chat's record goes to the page, from the list or asked for on its own (once per chat). An
  // archived chat shown outside the archived view says so, with Unarchive at hand.
  async showCurrent() {
    const id = this.current();
    let session = this.sessions.find((other) => other.id === id);
    if (!session && id) {
      if (this.shown?.id !== id) {
        try {
          this.shown = await this.ctx.api(`/api/sessions/${encodeURIComponent(id)}`);
        } catch {
          return; // the page says when the chat is not found
        }
        if (this.stopped || id !== this.current()) return;
      }
      session = this.shown;
    }
    this.note.replaceChildren(...(session?.archived && !this.archived ? [h("p", { class: "session-archived-note" },
      "This chat is archived. ", h("button", { type: "button", class: "link", onclick: () => this.update(session,
        { archived: false }) }, "Unarchive it"))] : []));
    if (session) this.onCurrent(session);
  }

  item(session) {
    const link = h("a", { href: `#/chat/${encodeURIComponent(session.id)}`, class: "session-link",
      "aria-current": session.id === this.current() ? "page" : null },
    h("span", { class: "session-name", title: session.name }, session.name),
    h("span", { class: "session-meta" }, `${session.message_count} messages · ${formatTime(session.updated_at)}`));
    const button = (label, onclick, extra = "", attrs = {}) => h("button", { type: "button",
      class: `small ${extra}`.trim(), "aria-label": `${label} ${session.name}`, onclick, ...attrs }, label);
    const item = h("li", { class: "session", "data-session-id": session.id }, link,
      h("div", { class: "session-actions" },
        this.archived ? null : button("Pin", () => this.update(session, { pinned: !session.pinned }), "session-pin",
          { "aria-pressed": String(Boolean(session.pinned)) }),
        button(session.archived ? "Unarchive" : "Archive",
          () => this.update(session, { archived: !session.archived }), "session-archive"),
        button("Rename", () => this.renameForm(item, session)),
        button("Delete", () => this.remove(session), "danger"),
        this.itemActions.map((action) => action(session))));
    return item;
  }

  // Pin, unpin, archive or unarchive (PATCH). A chat that leaves the view (archived, or unarchived in the
  // archived view) leaves the list, and the focus goes to the chat after it; the chat shown stays shown.
  async update(session, changes) {
    const before = [...this.list.querySelectorAll(".session")].findIndex((item) => item.dataset.sessionId === session.id);
    let updated;
    try {
      updated = await this.ctx.api(`/api/sessions/${encodeURIComponent(session.id)}`, { method: "PATCH", body: changes });
    } catch (error) {
      this.ctx.toast(`The chat could not be changed: ${error.message}`, "error");
      return;
    }
    if (this.stopped) return;
    Object.assign(session, updated);
    if (this.shown?.id === session.id) Object.assign(this.shown, updated);
    const leaves = Boolean(updated.archived) !== this.archived;
    if (leaves) this.sessions = this.sessions.filter((other) => other.id !== session.id);
    if (leaves && session.id === this.current()) this.shown = session;
    else if (!this.sessions.includes(session) && Boolean(updated.archived) === this.archived) this.sessions.push(session);
    this.render();
    if (leaves) {
      const items = this.list.querySelectorAll(".session-link");
      (items[Math.min(before, items.length - 1)] || this.archivedButton).focus();
    } else {
      this.list.querySelector(`[data-session-id="${CSS.escape(session.id)}"] .session-pin`)?.focus();
    }
    const done = "pinned" in changes ? (updated.pinned ? "Chat pinned." : "Chat unpinned.")
      : updated.archived ? "Chat archived." : "Chat restored from the archive.";
    this.ctx.toast(done, "success");
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
      this.drafts.remove(session.id);
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
