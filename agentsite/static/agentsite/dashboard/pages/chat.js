// Chat: the session list (New chat, rename, delete) and the conversation of #/chat/<session_id>, whose
// replies stream in from POST /api/sessions/:id/chat (SSE). Everything a model or a user wrote is shown
// through renderMarkdown (sanitised). "Stop" hangs up the stream: the server keeps the partial reply as
// `interrupted`. Attachments are uploaded first (/api/upload) and sent as upload ids with the message.
// Voice: pages/chat/voice.js.
import { confirmDialog, errorBox, formatSize, formatTime, h, loading, renderMarkdown } from "../ui.js";
import { listAll } from "../api.js";
import { Dictation, Reader } from "./chat/voice.js";

const NAME_FROM_MESSAGE = 60; // characters of the first message a chat started from #/chat is named after
const FOLLOW_MARGIN_PX = 120; // within this distance of the end, the log follows new content

export async function mount(root, ctx) {
  const page = new ChatPage(root, ctx);
  await page.start();
  return () => page.stop();
}

class ChatPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.sessionId = ctx.route[0] || null;
    this.sessions = [];
    this.stopped = false;
    this.streaming = null; // the AbortController of the reply being streamed
    this.pending = []; // attachments: {file, upload?, error?, element}
    this.objectUrls = new Set();
    this.uploads = null; // id -> upload record, loaded when a message has attachments
    this.config = null;
    this.dictation = null;
    this.reader = null;
  }

  stop() {
    this.stopped = true;
    this.streaming?.abort();
    this.dictation?.cancel();
    this.reader?.stop();
    for (const url of this.objectUrls) URL.revokeObjectURL(url);
  }

  async start() {
    this.render();
    this.loadConfig();
    await Promise.all([this.loadSessions(), this.loadConversation()]);
  }

  // --- layout ---

  render() {
    this.listToggle = h("button", { type: "button", class: "chat-list-toggle", "aria-expanded": "false",
      "aria-controls": "chat-sessions", onclick: () => this.toggleList() }, "Chats");
    this.sessionList = h("ul", { class: "session-list" });
    this.listState = h("div", { class: "session-state" }, loading("Loading chats…"));
    this.aside = h("nav", { id: "chat-sessions", class: "chat-sessions", "aria-label": "Chats" },
      h("button", { type: "button", class: "primary new-chat", onclick: () => this.newChat() }, "New chat"),
      this.listState, this.sessionList);
    if (!this.sessionId) this.aside.classList.add("open");

    this.title = h("h1", { id: "chat-title", class: "chat-title" }, this.sessionId ? "Chat" : "New conversation");
    this.log = h("div", { class: "chat-log", role: "log", "aria-label": "Conversation", "aria-live": "polite",
      tabindex: "0" });
    // Whether the log follows new content: true while the reader is at (or near) the end. Measured when
    // the reader scrolls, not when content arrives: a tool call or a long delta can grow the log by more
    // than the margin in one step, and measuring after it made the log stop following mid-reply.
    this.following = true;
    this.log.addEventListener("scroll", () => {
      this.following = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < FOLLOW_MARGIN_PX;
    }, { passive: true });
    this.root.replaceChildren(h("div", { class: "chat" }, this.aside,
      h("section", { class: "chat-main", "aria-labelledby": "chat-title" },
        h("header", { class: "chat-header" }, this.listToggle, this.title),
        this.log, this.composer())));
  }

  // A long name is cut after two lines on screen (chat.css); the title attribute holds all of it.
  setTitle(text) {
    this.title.textContent = text;
    this.title.title = text;
  }

  toggleList(open) {
    const show = open ?? !this.aside.classList.contains("open");
    this.aside.classList.toggle("open", show);
    this.listToggle.setAttribute("aria-expanded", String(show));
  }

  composer() {
    this.input = h("textarea", { id: "chat-message", rows: "3", placeholder: "Ask anything… (Enter sends, Shift+Enter starts a new line)",
      "aria-describedby": "chat-composer-help", onkeydown: (event) => this.onKey(event) });
    this.fileInput = h("input", { type: "file", multiple: true, hidden: true, tabindex: "-1",
      onchange: () => { this.attach([...this.fileInput.files]); this.fileInput.value = ""; } });
    this.attachments = h("ul", { class: "chat-attachments", "aria-label": "Files to send" });
    this.composerError = h("div", { class: "form-error", role: "alert" });
    this.sendButton = h("button", { type: "submit", class: "primary" }, "Send");
    this.stopButton = h("button", { type: "button", class: "danger", hidden: true, onclick: () => this.stopReply() },
      "Stop");
    this.micButton = h("button", { type: "button", "aria-pressed": "false", onclick: () => this.toggleDictation() },
      "Dictate");
    const form = h("form", { class: "chat-composer", onsubmit: (event) => { event.preventDefault(); this.send(); },
      ondragover: (event) => event.preventDefault(),
      ondrop: (event) => { event.preventDefault(); this.attach([...(event.dataTransfer?.files || [])]); } },
    h("label", { for: "chat-message", class: "visually-hidden" }, "Message"),
    this.input,
    h("p", { id: "chat-composer-help", class: "visually-hidden" }, "Enter sends; Shift+Enter starts a new line."),
    this.attachments, this.composerError,
    h("div", { class: "actions" },
      h("button", { type: "button", onclick: () => this.fileInput.click() }, "Attach files"), this.fileInput,
      this.micButton,
      h("span", { class: "spacer" }), this.stopButton, this.sendButton));
    return form;
  }

  onKey(event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !event.ctrlKey && !event.altKey) {
      event.preventDefault();
      this.send();
    }
  }

  // --- sessions ---

  async loadSessions() {
    try {
      this.sessions = await listAll("/api/sessions?limit=200", { max: 1000 });
      if (this.stopped) return;
      this.listState.replaceChildren(this.sessions.length ? "" : h("p", { class: "empty" }, "No chats yet."));
      this.renderSessions();
    } catch (error) {
      if (this.stopped) return;
      this.listState.replaceChildren(errorBox(`The chats could not be loaded: ${error.message}`, () => this.loadSessions()));
    }
  }

  renderSessions() {
    this.sessions.sort((a, b) => String(b.updated_at).localeCompare(String(a.updated_at))); // latest first
    this.sessionList.replaceChildren(...this.sessions.map((session) => this.sessionItem(session)));
    const current = this.sessions.find((session) => session.id === this.sessionId);
    if (current) this.setTitle(current.name);
  }

  sessionItem(session) {
    const link = h("a", { href: `#/chat/${encodeURIComponent(session.id)}`, class: "session-link",
      "aria-current": session.id === this.sessionId ? "page" : null },
    h("span", { class: "session-name", title: session.name }, session.name),
    h("span", { class: "session-meta" }, `${session.message_count} messages · ${formatTime(session.updated_at)}`));
    const item = h("li", { class: "session", "data-session-id": session.id }, link,
      h("div", { class: "session-actions" },
        h("button", { type: "button", class: "small", "aria-label": `Rename ${session.name}`,
          onclick: () => this.renameForm(item, session) }, "Rename"),
        h("button", { type: "button", class: "small danger", "aria-label": `Delete ${session.name}`,
          onclick: () => this.deleteSession(session) }, "Delete")));
    return item;
  }

  async newChat() {
    try {
      const session = await this.ctx.api("/api/sessions", { method: "POST", body: {} });
      this.ctx.navigate(`#/chat/${session.id}`);
    } catch (error) {
      this.ctx.toast(`A new chat could not be created: ${error.message}`, "error");
    }
  }

  renameForm(item, session) {
    const input = h("input", { value: session.name, maxlength: "200", required: true, "aria-label": "Chat name" });
    const problem = h("div", { class: "form-error", role: "alert" });
    const cancel = () => item.replaceWith(this.sessionItem(session));
    const form = h("form", { class: "session-rename", onsubmit: async (event) => {
      event.preventDefault();
      const name = input.value.trim();
      if (!name) { problem.textContent = "A chat needs a name."; return; }
      try {
        const renamed = await this.ctx.api(`/api/sessions/${session.id}/rename`, { method: "PUT", body: { name } });
        Object.assign(session, renamed);
        this.renderSessions();
        this.sessionList.querySelector(`[data-session-id="${CSS.escape(session.id)}"] .session-link`)?.focus();
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

  async deleteSession(session) {
    if (!(await confirmDialog(`Delete the chat "${session.name}" and its messages?`, { confirmLabel: "Delete" }))) return;
    try {
      await this.ctx.api(`/api/sessions/${session.id}`, { method: "DELETE" });
      this.ctx.toast("Chat deleted.", "success");
      if (session.id === this.sessionId) {
        this.ctx.navigate("#/chat");
        return;
      }
      this.sessions = this.sessions.filter((other) => other.id !== session.id);
      this.renderSessions();
      this.aside.querySelector(".new-chat").focus();
    } catch (error) {
      this.ctx.toast(`The chat could not be deleted: ${error.message}`, "error");
    }
  }

  // --- the conversation ---

  async loadConversation() {
    if (!this.sessionId) {
      this.log.replaceChildren(h("p", { class: "empty chat-empty" },
        "Write a message below to start a new chat, or pick one from the list."));
      return;
    }
    this.log.replaceChildren(loading("Loading the conversation…"));
    try {
      const messages = await listAll(`/api/sessions/${encodeURIComponent(this.sessionId)}/messages?limit=200`, { max: 5000 });
      if (this.stopped) return;
      this.log.replaceChildren();
      if (!messages.length) this.log.append(h("p", { class: "empty chat-empty" }, "No messages yet: say hello."));
      for (const message of messages) this.log.append(this.messageView(message));
      this.scrollDown(true);
      this.input.focus();
    } catch (error) {
      if (this.stopped) return;
      if (error.status === 404) {
        this.setTitle("Chat not found");
        this.log.replaceChildren(errorBox("There is no such chat (it may have been deleted)."));
        this.sessionId = null;
      } else {
        this.log.replaceChildren(errorBox(`The conversation could not be loaded: ${error.message}`, () => this.loadConversation()));
      }
    }
  }

  messageView(message) {
    const view = new MessageView(this, message.role);
    view.setContent(message.content);
    if (message.attachments?.length) view.showAttachments(message.attachments);
    for (const call of message.tool_calls || []) {
      view.toolCall(call);
      if (call.result) view.toolResult({ id: call.id, content: call.result.content, is_error: call.result.is_error });
    }
    if (message.sources?.length) view.showSources(message.sources);
    view.setStatus(message.status);
    view.element.dataset.messageId = message.id;
    return view.element;
  }

  scrollDown(force = false) {
    if (force) this.following = true;
    if (this.following) this.log.scrollTop = this.log.scrollHeight;
  }

  // --- sending ---

  async send() {
    if (this.streaming) return;
    const text = this.input.value;
    if (!text.trim()) {
      this.composerError.textContent = "Write a message first.";
      this.input.focus();
      return;
    }
    if (this.pending.some((item) => !item.upload && !item.error)) {
      this.composerError.textContent = "Wait until the attachments have uploaded.";
      return;
    }
    this.composerError.textContent = "";
    const attachments = this.pending.filter((item) => item.upload).map((item) => item.upload);
    const controller = new AbortController();
    this.streaming = controller;
    this.setBusy(true);
    try {
      if (!this.sessionId) await this.createSessionFor(text);
      this.log.querySelector(".chat-empty")?.remove();
      const mine = new MessageView(this, "user");
      mine.setContent(text);
      if (attachments.length) mine.showAttachments(attachments.map((upload) => upload.id), attachments);
      this.log.append(mine.element);
      this.input.value = "";
      this.clearAttachments();
      const reply = new MessageView(this, "assistant");
      reply.setWaiting();
      this.log.append(reply.element);
      this.scrollDown(true);
      await this.streamReply(text, attachments, controller, reply);
    } catch (error) {
      if (!controller.signal.aborted && !this.stopped) {
        this.composerError.textContent = error.message;
        this.ctx.toast(`The message was not sent: ${error.message}`, "error");
      }
    } finally {
      if (this.streaming === controller) this.streaming = null;
      if (!this.stopped) {
        this.setBusy(false);
        this.loadSessions();
      }
    }
  }

  async createSessionFor(text) {
    const name = text.trim().replace(/\s+/g, " ").slice(0, NAME_FROM_MESSAGE);
    const session = await this.ctx.api("/api/sessions", { method: "POST", body: { name } });
    this.sessionId = session.id;
    this.setTitle(session.name);
    // replaceState: the address shows the new chat without a hashchange, which would remount the page
    // and hang up the reply that is about to stream.
    history.replaceState(null, "", `#/chat/${encodeURIComponent(session.id)}`);
    this.toggleList(false);
  }

  async streamReply(text, attachments, controller, reply) {
    const body = { message: text };
    if (attachments.length) body.attachments = attachments.map((upload) => upload.id);
    try {
      await this.ctx.stream(`/api/sessions/${encodeURIComponent(this.sessionId)}/chat`, {
        body, signal: controller.signal, onEvent: ({ event, data }) => {
          if (this.stopped) return;
          reply.onEvent(event, data);
          this.scrollDown();
        },
      });
      if (!reply.finished) reply.fail("The reply ended before it was finished.");
    } catch (error) {
      if (controller.signal.aborted) {
        reply.setStatus("interrupted");
        return;
      }
      if (error.status && error.status < 500 && !reply.started) {
        // Refused before anything was stored for the reply (e.g. a message too long, an attachment gone).
        reply.element.remove();
        throw error;
      }
      reply.fail(error.message);
    }
  }

  stopReply() {
    this.streaming?.abort();
  }

  setBusy(busy) {
    this.sendButton.disabled = busy;
    this.stopButton.hidden = !busy;
    this.log.setAttribute("aria-busy", String(busy));
    if (busy) this.stopButton.focus();
    else if (document.activeElement === this.stopButton || document.activeElement === document.body) this.input.focus();
  }

  // --- attachments ---

  attach(files) {
    for (const file of files) {
      const item = { file, upload: null, error: null, element: h("li", { class: "attachment uploading" }) };
      this.pending.push(item);
      this.attachments.append(item.element);
      this.renderAttachment(item);
      this.upload(item);
    }
  }

  async upload(item) {
    const form = new FormData();
    form.append("file", item.file, item.file.name);
    try {
      item.upload = await this.ctx.api("/api/upload", { method: "POST", body: form });
    } catch (error) {
      item.error = error.message;
    }
    if (!this.stopped) this.renderAttachment(item);
  }

  renderAttachment(item) {
    const name = item.file.name;
    const state = item.error ? h("span", { class: "attachment-error", role: "alert" }, `not uploaded: ${item.error}`)
      : item.upload ? h("span", { class: "muted" }, formatSize(item.upload.size))
        : h("span", { class: "muted" }, "uploading…");
    item.element.className = `attachment${item.error ? " failed" : item.upload ? "" : " uploading"}`;
    item.element.replaceChildren(h("span", { class: "attachment-name" }, name), " ", state,
      h("button", { type: "button", class: "small", "aria-label": `Remove ${name}`, onclick: () => this.detach(item) }, "×"));
  }

  detach(item) {
    this.pending = this.pending.filter((other) => other !== item);
    item.element.remove();
    if (item.upload) this.ctx.api(`/api/uploads/${item.upload.id}`, { method: "DELETE" }).catch(() => {});
    this.input.focus();
  }

  clearAttachments() {
    this.pending = [];
    this.attachments.replaceChildren();
  }

  async uploadRecord(id) {
    if (!this.uploads) {
      this.uploads = new Map();
      try {
        for (const upload of await listAll("/api/uploads?limit=200", { max: 2000 })) this.uploads.set(upload.id, upload);
      } catch {
        // Shown as an unknown file below.
      }
    }
    return this.uploads.get(id) || null;
  }

  async imageUrl(upload) {
    const response = await this.ctx.api(`/api/uploads/${encodeURIComponent(upload.id)}`, { raw: true });
    const url = URL.createObjectURL(await response.blob());
    this.objectUrls.add(url);
    return url;
  }

  // --- voice ---

  async loadConfig() {
    try {
      this.config = await this.ctx.api("/api/config");
    } catch {
      this.config = {};
    }
  }

  voiceProblem(message) {
    this.composerError.textContent = message;
    this.ctx.toast(message, "error");
  }

  async toggleDictation() {
    if (this.dictation) return this.finishDictation();
    this.composerError.textContent = "";
    if (!this.config) await this.loadConfig();
    const dictation = new Dictation({ api: this.ctx.api, provider: this.config?.stt_provider });
    try {
      await dictation.start();
    } catch (error) {
      this.voiceProblem(error.message);
      return;
    }
    this.dictation = dictation;
    dictation.onEnded = () => { if (this.dictation === dictation) this.finishDictation(); };
    this.micButton.textContent = "Finish dictation";
    this.micButton.setAttribute("aria-pressed", "true");
  }

  async finishDictation() {
    const dictation = this.dictation;
    this.dictation = null;
    this.micButton.textContent = "Transcribing…";
    this.micButton.disabled = true;
    try {
      const text = await dictation.finish();
      if (!text) throw new Error("No speech was recognised: try again closer to the microphone.");
      this.input.value = this.input.value ? `${this.input.value.trimEnd()} ${text}` : text;
      this.input.focus();
    } catch (error) {
      this.voiceProblem(`Dictation failed: ${error.message}`);
    } finally {
      this.micButton.textContent = "Dictate";
      this.micButton.disabled = false;
      this.micButton.setAttribute("aria-pressed", "false");
    }
  }

  async readAloud(view, button) {
    if (this.reader && this.reading === view) {
      this.reader.stop();
      this.reading = null;
      button.textContent = "Read aloud";
      return;
    }
    if (!this.config) await this.loadConfig();
    this.reader?.stop();
    this.reader = new Reader({ api: this.ctx.api, provider: this.config?.tts_provider, voice: this.config?.tts_voice });
    for (const other of this.log.querySelectorAll(".read-aloud")) other.textContent = "Read aloud";
    this.reading = view;
    button.textContent = "Stop reading";
    const done = () => {
      if (this.reading === view) this.reading = null;
      button.textContent = "Read aloud";
    };
    const failed = (error) => {
      done();
      this.voiceProblem(`Read-aloud failed: ${error.message}`);
    };
    try {
      await this.reader.speak(view.text(), done, failed);
    } catch (error) {
      failed(error);
    }
  }
}

// One message in the log: its Markdown body, attachments, folded tool calls and sources, and its state.
class MessageView {
  constructor(page, role) {
    this.page = page;
    this.role = role;
    this.content = "";
    this.started = false;
    this.finished = false;
    this.calls = new Map();
    this.body = h("div", { class: "message-body markdown" });
    this.extras = h("div", { class: "message-extras" });
    this.statusLine = h("p", { class: "message-status" });
    this.actions = h("div", { class: "message-actions" });
    const who = { user: "You", assistant: "Assistant", tool: "Tool" }[role] || role;
    this.element = h("article", { class: `message message-${role}`, "aria-label": `${who} said` },
      h("p", { class: "message-role" }, who), this.body, this.extras, this.statusLine, this.actions);
    if (role === "assistant") {
      const read = h("button", { type: "button", class: "small read-aloud", onclick: () => page.readAloud(this, read) },
        "Read aloud");
      this.actions.append(read);
    }
    this.frame = 0;
  }

  text() {
    return this.body.textContent.trim();
  }

  setContent(content) {
    this.content = content || "";
    this.renderBody();
  }

  setWaiting() {
    this.body.replaceChildren(h("span", { class: "typing", "aria-label": "The assistant is answering" },
      h("span", { class: "spinner", "aria-hidden": "true" }), " Thinking…"));
  }

  renderBody() {
    this.body.replaceChildren(renderMarkdown(this.content));
  }

  // Many deltas a frame: render once per animation frame, not once per delta.
  scheduleRender() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.renderBody();
      this.page.scrollDown();
    });
  }

  onEvent(event, data) {
    if (event === "start") {
      this.started = true;
      if (data?.message_id) this.element.dataset.messageId = data.message_id;
      this.element.classList.add("streaming");
    } else if (event === "delta") {
      this.content += data?.content ?? "";
      this.scheduleRender();
    } else if (event === "tool_call") {
      this.toolCall(data);
    } else if (event === "tool_result") {
      this.toolResult(data);
    } else if (event === "done") {
      this.finished = true;
      cancelAnimationFrame(this.frame);
      this.frame = 0;
      this.content = typeof data?.content === "string" ? data.content : this.content;
      this.renderBody();
      if (data?.sources?.length) this.showSources(data.sources);
      this.setStatus("complete");
    } else if (event === "error") {
      this.finished = true;
      cancelAnimationFrame(this.frame);
      this.renderBody();
      this.fail(data?.message || "The reply failed.", data?.code);
    }
  }

  toolCall(call) {
    const result = h("div", { class: "tool-result muted" }, "Running…");
    const details = h("details", { class: "tool-call" },
      h("summary", {}, "Tool call: ", h("code", {}, call.name || "tool")),
      h("p", { class: "tool-label" }, "Arguments"),
      h("pre", {}, typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments ?? {}, null, 2)),
      h("p", { class: "tool-label" }, "Result"), result);
    this.calls.set(call.id, { details, result });
    this.toolsBox().append(details);
  }

  toolResult(data) {
    const entry = this.calls.get(data.id);
    if (!entry) return;
    entry.result.className = `tool-result${data.is_error ? " error" : ""}`;
    entry.result.replaceChildren(h("pre", {}, String(data.content ?? "")));
    if (data.is_error) entry.details.classList.add("failed");
  }

  toolsBox() {
    if (!this.tools) {
      this.tools = h("div", { class: "tool-calls" });
      this.extras.prepend(this.tools);
    }
    return this.tools;
  }

  showSources(sources) {
    this.extras.querySelector(".sources")?.remove();
    const items = sources.map((source) => h("li", {}, h("span", { class: "source-name" }, source.filename || "document"),
      source.chunk_index !== undefined ? ` (part ${Number(source.chunk_index) + 1})` : "",
      typeof source.score === "number" ? h("span", { class: "score" }, ` score ${source.score.toFixed(3)}`) : ""));
    this.extras.append(h("details", { class: "sources" },
      h("summary", {}, `Knowledge sources (${sources.length})`), h("ol", {}, items)));
  }

  async showAttachments(ids, known = []) {
    const list = h("ul", { class: "message-attachments", "aria-label": "Attachments" });
    this.extras.append(list);
    for (const id of ids) {
      const upload = known.find((item) => item.id === id) || await this.page.uploadRecord(id);
      if (!upload) {
        list.append(h("li", { class: "muted" }, "A file that has been deleted"));
        continue;
      }
      const item = h("li", {}, h("span", { class: "attachment-name" }, upload.filename), " ",
        h("span", { class: "muted" }, formatSize(upload.size)));
      list.append(item);
      if (upload.is_image) {
        this.page.imageUrl(upload).then((url) => item.prepend(h("img", { src: url, alt: upload.filename, class: "thumb" })))
          .catch(() => {});
      }
    }
  }

  setStatus(status) {
    this.element.classList.remove("streaming");
    this.element.dataset.status = status || "complete";
    if (status === "interrupted") {
      this.finished = true;
      cancelAnimationFrame(this.frame);
      this.renderBody();
      this.statusLine.replaceChildren(h("span", { class: "badge warning" }, "Interrupted"),
        " The reply was stopped before it was finished.");
    } else if (status === "error") {
      this.statusLine.replaceChildren(h("span", { class: "badge error" }, "Error"), " The reply failed.");
    } else {
      this.statusLine.replaceChildren();
    }
  }

  fail(message, code) {
    this.finished = true;
    if (!this.content) this.body.replaceChildren();
    this.element.classList.remove("streaming");
    this.element.dataset.status = "error";
    this.statusLine.replaceChildren(h("span", { class: "badge error" }, "Error"), ` ${message}`);
    this.statusLine.setAttribute("role", "alert");
    if (code) this.statusLine.dataset.code = code;
  }
}
