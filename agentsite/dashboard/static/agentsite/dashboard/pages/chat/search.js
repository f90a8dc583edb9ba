// The chat list's search box: typing searches the user's chats (GET /api/sessions?q=, debounced) and shows the
// matching chats in place of the list, each with the excerpt of its newest matching message, the matching
// words marked; Escape or an empty box brings the list back; a result opens its chat. The excerpt is text
// from a user or a model: it is only ever put in as text nodes (the <mark>s are built here, never parsed).
import { errorBox, formatTime, h, loading } from "../../ui.js";

const DEBOUNCE_MS = 250;
const MAX_QUERY = 200; // the API's limit on q

// options: ctx (the page's), list (the element the results replace while a search is shown), current() -> the
// id of the chat shown.
export class SessionSearch {
  constructor({ ctx, list, current }) {
    Object.assign(this, { ctx, list, current });
    this.timer = null;
    this.asked = 0; // the number of the latest search: an older answer that arrives late is dropped
    this.input = h("input", { type: "search", class: "session-search-input", placeholder: "Search chats",
      "aria-label": "Search chats", maxlength: String(MAX_QUERY), autocomplete: "off",
      oninput: () => this.schedule(), onkeydown: (event) => this.key(event) });
    this.element = h("form", { role: "search", class: "session-search", onsubmit: (event) => {
      event.preventDefault();
      this.run();
    } }, this.input);
    this.status = h("div", { class: "session-search-status", role: "status", "aria-live": "polite" });
    this.results = h("ul", { class: "session-search-results", "aria-label": "Search results" });
    this.panel = h("div", { class: "session-search-panel", hidden: true }, this.status, this.results);
  }

  key(event) {
    if (event.key !== "Escape" || !this.input.value) return;
    event.preventDefault();
    this.input.value = "";
    this.close();
  }

  schedule() {
    clearTimeout(this.timer);
    if (!this.input.value.trim()) {
      this.close();
      return;
    }
    this.timer = setTimeout(() => this.run(), DEBOUNCE_MS);
  }

  close() {
    clearTimeout(this.timer);
    this.asked += 1;
    this.panel.hidden = true;
    this.list.hidden = false;
    this.results.replaceChildren();
    this.status.replaceChildren();
  }

  async run() {
    clearTimeout(this.timer);
    const q = this.input.value.trim();
    if (!q) {
      this.close();
      return;
    }
    const asked = ++this.asked;
    this.panel.hidden = false;
    this.list.hidden = true;
    this.status.replaceChildren(loading("Searching…"));
    try {
      const found = await this.ctx.api(`/api/sessions?q=${encodeURIComponent(q)}&limit=50`);
      if (asked !== this.asked) return;
      this.show(found);
    } catch (error) {
      if (asked !== this.asked) return;
      this.results.replaceChildren();
      this.status.replaceChildren(errorBox(`The search failed: ${error.message}`, () => this.run()));
    }
  }

  show(found) {
    const more = found.count > found.results.length ? ` (the ${found.results.length} most recent shown)` : "";
    this.status.replaceChildren(found.count
      ? h("p", { class: "session-search-count" }, `${found.count} ${found.count === 1 ? "chat" : "chats"}${more}`)
      : h("p", { class: "empty" }, "No chats match."));
    this.results.replaceChildren(...found.results.map((session) => this.item(session)));
  }

  item(session) {
    const match = session.match || { snippet: "", highlights: [] };
    return h("li", { class: "session session-search-result", "data-session-id": session.id },
      h("a", { href: `#/chat/${encodeURIComponent(session.id)}`, class: "session-link",
        "aria-current": session.id === this.current() ? "page" : null },
      h("span", { class: "session-name", title: session.name }, session.name),
      match.message ? h("span", { class: "session-snippet" }, ...withMarks(match.snippet, match.highlights)) : null,
      h("span", { class: "session-meta" }, `${session.archived ? "Archived · " : ""}${formatTime(session.updated_at)}`)));
  }
}

// The snippet as text nodes and <mark> elements; highlights are [start, end) offsets in code points.
export function withMarks(snippet, highlights) {
  const chars = Array.from(String(snippet));
  const parts = [];
  let at = 0;
  for (const [start, end] of [...(highlights || [])].sort((a, b) => a[0] - b[0])) {
    if (!(Number.isInteger(start) && Number.isInteger(end)) || start < at || end <= start || end > chars.length) continue;
    if (start > at) parts.push(chars.slice(at, start).join(""));
    parts.push(h("mark", {}, chars.slice(start, end).join("")));
    at = end;
  }
  if (at < chars.length) parts.push(chars.slice(at).join(""));
  return parts;
}
