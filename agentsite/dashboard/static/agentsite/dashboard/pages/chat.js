// Chat: the session list (New chat, rename, delete) and the conversation of #/chat/<session_id>, whose
// replies stream in from POST /api/sessions/:id/chat (SSE). Everything a model or a user wrote is shown
// through renderMarkdown (sanitised). The log shows the selected branch of the chat's tree (branches.js:
// the arrows between versions, Edit, Regenerate). Stop (or Escape) asks the server to stop the reply, which
// it keeps as `stopped` (turn.js); leaving the page hangs up (`interrupted`). Attachments are uploaded first
// (/api/upload) and sent as upload ids with the message.
// The header's model picker sets the chat's model (the session's `model`, from GET /api/models); its agent
// picker, the agent the chat talks to (the session's `agent`, from GET /api/agents): choosing another starts a
// new chat with it, and an empty chat offers the agent's starters as buttons that send them.
//
// This module lays out the page and runs the conversation (loading it, sending, editing, regenerating,
// streaming the reply); its parts are in pages/chat/: sessions.js (the chat list), composer.js (the message
// box, attachments, dictation), message.js (one message in the log, and the uploads it shows), branches.js
// (the path shown, and its controls) over tree.js (the messages' tree), turn.js (a reply streaming, and
// stopping it), voice.js (speech in and out) and readaloud.js (a message read aloud), modelpicker.js and
// agentpicker.js (the header's pickers), transfer.js (export and import). A chat started here is named by the
// server after its first exchange (the stream's `title` event).
import { errorBox, h, loading } from "../ui.js";
import { AgentPicker } from "./chat/agentpicker.js";
import { Branches } from "./chat/branches.js";
import { Composer } from "./chat/composer.js";
import { MessageView, Uploads } from "./chat/message.js";
import { ModelPicker } from "./chat/modelpicker.js";
import { ReadAloud } from "./chat/readaloud.js";
import { SessionList } from "./chat/sessions.js";
import { ChatTransfer } from "./chat/transfer.js";
import { Tree } from "./chat/tree.js";
import { Turn } from "./chat/turn.js";

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
    this.stopped = false;
    this.streaming = this.trailing = null; // the Turn of the reply streaming; a finished one's, read on (release)
    this.config = null; // a Promise of /api/config, for the voice providers
    this.loaded = null; // a Promise of the conversation's history shown in the log (it never rejects)
    this.reader = new ReadAloud({ api: ctx.api, voiceConfig: () => this.voiceConfig(), log: () => this.log,
      problem: (message) => this.composer.problem(message) });
    this.uploads = new Uploads(ctx.api);
    // What every MessageView may call back.
    this.messageHooks = { uploads: this.uploads, readAloud: (view, button) => this.reader.toggle(view, button),
      scrollDown: () => this.scrollDown() };
    this.models = new ModelPicker({ ctx, sessionId: () => this.sessionId });
    this.agents = new AgentPicker({ onChoose: () => this.chooseAgent() });
    this.sessions = new SessionList({ ctx, current: () => this.sessionId, onCurrent: (session) => {
      this.setTitle(session.name);
      this.models.show(session.model);
      this.agents.show(session.agent);
      this.refreshStarters();
    }, onNew: () => this.newChat() });
    this.transfer = new ChatTransfer({ ctx, sessionId: () => this.sessionId, onImported: () => this.sessions.load() });
    this.opening = 0; // counts New chat clicks: only the latest one's chat is shown
    this.composer = new Composer({ ctx, voiceConfig: () => this.voiceConfig(), onSend: () => this.send(),
      onStop: () => this.streaming?.stop() });
    // Up arrow in an empty composer edits the last question; Escape anywhere on the page stops the reply.
    this.composer.input.addEventListener("keydown", (event) => {
      if (event.key !== "ArrowUp" || this.composer.text || event.shiftKey || event.ctrlKey || event.altKey
        || event.metaKey || event.isComposing || this.streaming) return;
      if (this.branches.editLast()) event.preventDefault();
    });
    this.onKey = (event) => {
      if (event.key !== "Escape" || !this.streaming || event.defaultPrevented) return;
      event.preventDefault();
      this.streaming.stop();
    };
    document.addEventListener("keydown", this.onKey);
  }

  stop() {
    this.stopped = true;
    document.removeEventListener("keydown", this.onKey);
    this.streaming?.abort();
    this.trailing?.abort();
    this.sessions.stop();
    this.composer.stop();
    this.reader?.stop();
    this.uploads.revokeAll();
  }

  async start() {
    this.render();
    this.voiceConfig();
    await Promise.all([this.sessions.load(), this.reload(), this.models.load(),
      this.agents.load().then(() => this.refreshStarters())]);
  }

  voiceConfig() {
    this.config ??= this.ctx.api("/api/config").catch(() => ({}));
    return this.config;
  }

  render() {
    this.title = h("h1", { id: "chat-title", class: "chat-title" }, this.sessionId ? "Chat" : "New conversation");
    this.log = h("div", { class: "chat-log", role: "log", "aria-label": "Conversation", "aria-live": "polite",
      "aria-busy": "false", tabindex: "0" });
    // Whether the log follows new content: true while the reader is at (or near) the end. Measured when
    // the reader scrolls, not when content arrives: a tool call or a long delta can grow the log by more
    // than the margin in one step, and measuring after it made the log stop following mid-reply.
    this.following = true;
    this.log.addEventListener("scroll", () => {
      this.following = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < FOLLOW_MARGIN_PX;
    }, { passive: true });
    this.root.replaceChildren(h("div", { class: "chat" }, this.sessions.element,
      h("section", { class: "chat-main", "aria-labelledby": "chat-title" },
        h("header", { class: "chat-header" }, this.sessions.toggleButton, this.title, this.agents.element,
          this.models.element, this.transfer.menu),
        this.log, this.composer.element)));
    this.branches = new Branches({ ctx: this.ctx, log: this.log, hooks: this.messageHooks,
      sessionId: () => this.sessionId, onEdit: (message, text) => this.resend(message, text),
      onRegenerate: (message) => this.resend(message, null) });
    this.sessions.element.querySelector(".new-chat").after(this.transfer.importer);
  }

  // A long name is cut after two lines on screen (chat.css); the title attribute holds all of it.
  setTitle(text) {
    this.title.textContent = text;
    this.title.title = text;
  }

  // --- the conversation ---

  // A message sent while the history is loading waits for it: the history replaces the log's content, and
  // would otherwise wipe the message and the reply streaming into it (a fast typist on a slow server).
  reload() {
    this.loaded = this.loadConversation();
    return this.loaded;
  }

  async loadConversation() {
    if (!this.sessionId) {
      this.branches.show(new Tree());
      this.log.replaceChildren(this.emptyChat("Write a message below to start a new chat, or pick one from the list."));
      return;
    }
    this.log.replaceChildren(loading("Loading the conversation…"));
    try {
      const { results, current } = await this.ctx.api(`/api/sessions/${encodeURIComponent(this.sessionId)}/messages`);
      if (this.stopped) return;
      this.branches.show(new Tree(results, current));
      if (!results.length) this.log.append(this.emptyChat("No messages yet: say hello."));
      this.scrollDown(true);
      this.composer.input.focus();
    } catch (error) {
      if (this.stopped) return;
      if (error.status === 404) {
        this.setTitle("Chat not found");
        this.log.replaceChildren(errorBox("There is no such chat (it may have been deleted)."));
        this.sessionId = null;
      } else {
        this.log.replaceChildren(errorBox(`The conversation could not be loaded: ${error.message}`, () => this.reload()));
      }
    }
  }

  // An empty chat: the words, and the agent's starters as buttons that send that message.
  emptyChat(text) {
    const starters = this.agents.current()?.starters || [];
    return h("div", { class: "chat-empty" }, h("p", { class: "empty" }, text),
      starters.length ? h("div", { class: "chat-starters", role: "group", "aria-label": "Starters" },
        starters.map((starter) => h("button", { type: "button", class: "chat-starter", title: starter,
          onclick: () => this.sendStarter(starter) }, starter))) : null);
  }

  // The agents' list or the chat's agent arrived after the empty chat was drawn: its starters again.
  refreshStarters() {
    const empty = this.log.querySelector(".chat-empty");
    if (empty && this.log.children.length === 1) empty.replaceWith(this.emptyChat(empty.querySelector(".empty").textContent));
  }

  sendStarter(text) {
    if (this.streaming) return;
    this.composer.input.value = text;
    this.send();
  }

  // Another agent chosen: a chat shown goes on with its own agent and a new chat starts with the chosen one;
  // on a chat not started yet, the choice waits for its first message (and its starters show).
  chooseAgent() {
    if (this.sessionId) this.newChat();
    else this.refreshStarters();
  }

  // "New chat" opens the new chat in this page. Navigating to it mounted the page again once the session
  // existed, and a message sent in between went to the chat shown before (or started one of its own) and was
  // hung up by the remount. Here the page is the new chat from the click on: the composer keeps what is
  // typed, and a message sent before the session exists waits for it (send awaits `loaded`) and goes there.
  newChat() {
    this.streaming?.abort();
    this.streaming = null;
    this.trailing?.abort();
    this.reader?.stop();
    const ticket = ++this.opening;
    // From a chat, Back returns to it (hashchange mounts the page for it); #/chat is only replaced.
    if (this.sessionId) history.pushState(null, "", "#/chat");
    else history.replaceState(null, "", "#/chat");
    this.sessionId = null;
    this.setTitle("New conversation");
    this.models.show("");
    this.sessions.render();
    this.sessions.toggle(false);
    this.log.replaceChildren(loading("Starting a new chat…"));
    this.composer.input.focus();
    this.loaded = this.openNewSession(ticket);
  }

  async openNewSession(ticket) {
    let session;
    try {
      const agent = this.agents.pending();
      session = await this.ctx.api("/api/sessions", { method: "POST", body: agent ? { agent } : {} });
    } catch (error) {
      if (this.stopped || ticket !== this.opening) return;
      this.ctx.toast(`A new chat could not be created: ${error.message}`, "error");
      await this.loadConversation(); // the page stays a chat not started: a message sent starts one
      return;
    }
    if (this.stopped || ticket !== this.opening) return;
    this.sessionId = session.id;
    this.setTitle(session.name);
    history.replaceState(null, "", `#/chat/${encodeURIComponent(session.id)}`);
    this.sessions.load();
    await this.loadConversation();
  }

  scrollDown(force = false) {
    if (force) this.following = true;
    if (this.following) this.log.scrollTop = this.log.scrollHeight;
  }

  // --- sending ---

  async send() {
    if (this.streaming) return;
    const composer = this.composer;
    const text = composer.text;
    if (!text.trim()) {
      composer.showError("Write a message first.");
      composer.input.focus();
      return;
    }
    if (composer.uploading) {
      composer.showError("Wait until the attachments have uploaded.");
      return;
    }
    composer.showError("");
    const attachments = composer.uploaded();
    const turn = this.beginTurn();
    try {
      await this.loaded;
      // New chat clicked meanwhile: what was typed stays in the composer, unsent, for the new chat.
      if (this.stopped || turn.aborted) return;
      if (!this.sessionId) await this.createSession();
      this.log.querySelector(".chat-empty")?.remove();
      const body = { message: text };
      if (attachments.length) body.attachments = attachments.map((upload) => upload.id);
      // The question follows the reply on screen, even if another tab has selected another branch since.
      const { tree } = this.branches;
      if (tree.get(tree.current)?.role === "assistant") body.parent = tree.current;
      composer.clear();
      await this.streamTurn(turn, "chat", body, { text, parent: tree.current, attachments: body.attachments || [],
        uploads: attachments });
    } catch (error) {
      if (!turn.aborted && !this.stopped) {
        composer.showError(error.message);
        this.ctx.toast(`The message was not sent: ${error.message}`, "error");
      }
    } finally {
      this.endTurn(turn);
    }
  }

  // Edit (text: the new question, a sibling of `message`) or Regenerate (text null: a new sibling reply of
  // the assistant's `message`): the log drops the message and what followed it, and the new turn streams in.
  async resend(message, text) {
    if (this.streaming || !this.sessionId) return;
    const turn = this.beginTurn();
    try {
      this.branches.cutFrom(message.id);
      if (text === null) {
        await this.streamTurn(turn, `messages/${encodeURIComponent(message.id)}/regenerate`, {}, null);
      } else {
        const body = { message: text, parent: message.parent ?? null };
        if (message.attachments?.length) body.attachments = message.attachments;
        await this.streamTurn(turn, "chat", body, { text, parent: body.parent, attachments: message.attachments || [] });
      }
    } catch (error) {
      if (!turn.aborted && !this.stopped) {
        this.ctx.toast(`${text === null ? "The reply could not be regenerated" : "The edit was not sent"}: ${error.message}`,
          "error");
        this.branches.render(); // refused before anything was stored: the branch shown before, unchanged
      }
    } finally {
      this.endTurn(turn);
    }
  }

  beginTurn() {
    const turn = new Turn(this.ctx);
    this.streaming = turn;
    this.setBusy(true);
    return turn;
  }

  // At `done` the composer is free, while the stream is read on for the chat's `title` (seconds, at times); that
  // trailing stream is hung up when the page leaves or a new chat opens, never by the next question.
  release(turn) {
    if (this.streaming !== turn) return;
    [this.streaming, this.trailing] = [null, turn];
    if (!this.stopped) this.setBusy(false);
  }

  endTurn(turn) {
    if (this.streaming === turn) this.streaming = null;
    if (this.trailing === turn) this.trailing = null;
    if (!this.stopped) {
      if (!this.streaming) this.setBusy(false); // New chat hung this one up, and another may be sending
      this.sessions.load();
    }
  }

  async createSession() {
    const model = this.models.pending();
    const agent = this.agents.pending();
    const session = await this.ctx.api("/api/sessions", { method: "POST",
      body: { ...(model ? { model } : {}), ...(agent ? { agent } : {}) } });
    this.sessionId = session.id;
    this.setTitle(session.name);
    // replaceState: the address shows the new chat without a hashchange, which would remount the page
    // and hang up the reply that is about to stream.
    history.replaceState(null, "", `#/chat/${encodeURIComponent(session.id)}`);
    this.sessions.toggle(false);
  }

  // Streams one turn into the log: `question` ({text, parent, attachments, uploads?}) is shown first when the
  // turn asks one (null: a regenerated reply), then the reply as it comes. `path` is under the session's URL.
  async streamTurn(turn, path, body, question) {
    turn.sessionId = this.sessionId;
    if (question) {
      question.view = new MessageView("user", this.messageHooks);
      question.view.setContent(question.text);
      if (question.attachments.length) question.view.showAttachments(question.attachments, question.uploads || []);
      this.log.append(question.view.element);
    }
    const reply = new MessageView("assistant", this.messageHooks);
    reply.setWaiting();
    this.log.append(reply.element);
    this.scrollDown(true);
    try {
      await turn.run(`/api/sessions/${encodeURIComponent(this.sessionId)}/${path}`, body, ({ event, data }) => {
        if (this.stopped) return;
        if (event === "title") return this.retitle(data);
        reply.onEvent(event, data);
        if (event === "start") {
          this.branches.started(data, question);
          this.branches.attach(data.message_id, reply);
        } else if (event === "done") {
          this.branches.finished(data, reply);
          this.release(turn);
        }
        this.scrollDown();
      });
      if (!reply.finished) reply.fail("The reply ended before it was finished.");
    } catch (error) {
      if (turn.aborted) {
        if (!reply.finished) reply.setStatus("interrupted");
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

  // The chat's title, made from its first exchange (the `title` event after `done`).
  retitle(data) {
    if (!data?.name || data.session_id !== this.sessionId) return;
    this.setTitle(data.name);
    this.scrollDown(); // a longer title can take another line of the header, and the log's height with it
    this.sessions.load();
  }

  setBusy(busy) {
    this.log.setAttribute("aria-busy", String(busy));
    this.composer.setBusy(busy);
    this.branches.setBusy(busy);
  }
}
