// The chat's messages as the log shows them (see MessageView), and the uploads they show (see Uploads).
import { listAll } from "../../api.js";
import { formatSize, h } from "../../ui.js";
import { replyFacts, sourceChips, stepRow, timeElement } from "./details.js";
import { copyButton, renderMessageBody } from "./render.js";

// The records of the user's uploads, asked for once (when a message shows attachments), and images fetched
// with the user's token as object URLs, revoked when the page goes.
export class Uploads {
  constructor(api) {
    this.api = api;
    this.records = null; // id -> upload record
    this.objectUrls = new Set();
  }

  async record(id) {
    if (!this.records) {
      this.records = new Map();
      try {
        for (const upload of await listAll("/api/uploads?limit=200", { max: 2000 })) this.records.set(upload.id, upload);
      } catch {
        // Shown as an unknown file.
      }
    }
    return this.records.get(id) || null;
  }

  async imageUrl(upload) {
    const response = await this.api(`/api/uploads/${encodeURIComponent(upload.id)}`, { raw: true });
    const url = URL.createObjectURL(await response.blob());
    this.objectUrls.add(url);
    return url;
  }

  revokeAll() {
    for (const url of this.objectUrls) URL.revokeObjectURL(url);
  }
}

// One message in the log: its header (who, when), its tool steps, its body (Markdown, code and math: render.js),
// attachments and sources, its state, and its actions (Copy, Read aloud) beside its details (model, tokens...),
// which show while the message is hovered or holds the focus.
// hooks (the page's, shared by its messages): uploads (an Uploads), readAloud(view, button), scrollDown().
// setRecord(record) takes a stored message (GET .../messages) or a stream's `done` event and shows what it says.
export class MessageView {
  constructor(role, hooks) {
    this.hooks = hooks;
    this.role = role;
    this.content = "";
    this.started = false;
    this.finished = false;
    this.calls = new Map(); // live tool calls by id: their step, as far as the stream told it
    this.body = h("div", { class: "message-body markdown" });
    this.steps = h("div", { class: "message-steps", role: "group", "aria-label": "Tool steps" });
    this.extras = h("div", { class: "message-extras" });
    this.statusLine = h("p", { class: "message-status" });
    this.facts = h("p", { class: "message-facts" });
    this.actions = h("div", { class: "message-actions" });
    this.when = h("span", { class: "message-when" });
    const who = { user: "You", assistant: "Assistant", tool: "Tool" }[role] || role;
    this.element = h("article", { class: `message message-${role}`, "aria-label": `${who} said` },
      h("p", { class: "message-role" }, who, this.when), this.steps, this.body, this.extras, this.statusLine,
      h("div", { class: "message-footer" }, this.actions, this.facts));
    this.actions.append(copyButton("Copy", null, () => this.content));
    if (role === "assistant") {
      const read = h("button", { type: "button", class: "small read-aloud", onclick: () => hooks.readAloud(this, read) },
        "Read aloud");
      this.actions.append(read);
    }
    this.setTime(new Date().toISOString()); // until a record says when it was stored
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
    this.body.replaceChildren(renderMessageBody(this.content, () => this.scheduleRender()));
  }

  // Many deltas a frame: render once per animation frame, not once per delta.
  scheduleRender() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.renderBody();
      this.hooks.scrollDown();
    });
  }

  setTime(iso) {
    const time = timeElement(iso);
    if (time) this.when.replaceChildren(" · ", time);
  }

  // A stored message or a `done` event: its id, time, content, details, steps, sources and status.
  setRecord(record) {
    if (!record) return;
    const id = record.id ?? record.message_id;
    if (id) this.element.dataset.messageId = id;
    if (record.created_at) this.setTime(record.created_at);
    if (typeof record.content === "string" && record.content !== this.content) this.setContent(record.content);
    if (this.role === "assistant") this.facts.replaceChildren(...replyFacts(record));
    if (Array.isArray(record.steps)) this.showSteps(record.steps);
    if (Array.isArray(record.sources)) this.showSources(record.sources);
    if (record.status) this.setStatus(record.status);
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
    } else if (event === "tool_progress") {
      this.toolProgress(data);
    } else if (event === "tool_result") {
      this.toolResult(data);
    } else if (event === "done") {
      this.finished = true;
      cancelAnimationFrame(this.frame);
      this.frame = 0;
      this.content = typeof data?.content === "string" ? data.content : this.content;
      this.renderBody();
      this.setStatus(data?.status || "complete");
    } else if (event === "error") {
      this.finished = true;
      cancelAnimationFrame(this.frame);
      this.renderBody();
      this.fail(data?.message || "The reply failed.", data?.code);
    }
  }

  // A live tool call (the stream's tool_call event), shown running until its tool_result.
  toolCall(call) {
    const step = { id: call.id, name: call.name, arguments: call.arguments, result: null };
    const row = stepRow(step, { running: true });
    this.calls.set(call.id, { step, row });
    this.steps.append(row);
  }

  // What a running call reports (a remote agent's status, its answer so far): shown in its row until its result.
  toolProgress(data) {
    const entry = this.calls.get(data.id);
    if (!entry || entry.step.result !== null) return;
    entry.step.progress = String(data.content ?? "");
    const row = stepRow(entry.step, { running: true, open: entry.row.open });
    entry.row.replaceWith(row);
    entry.row = row;
  }

  toolResult(data) {
    const entry = this.calls.get(data.id);
    if (!entry) return;
    Object.assign(entry.step, { result: String(data.content ?? ""), is_error: Boolean(data.is_error) });
    const row = stepRow(entry.step, { open: entry.row.open });
    entry.row.replaceWith(row);
    entry.row = row;
  }

  // The recorded steps replace the live rows (they add each call's duration); a row left open stays open.
  showSteps(steps) {
    const open = new Set([...this.steps.querySelectorAll("details[open]")].map((row) => row.dataset.stepId));
    this.calls.clear();
    this.steps.replaceChildren(...steps.filter((step) => step?.type === "tool_call" || !step?.type)
      .map((step) => stepRow(step, { open: open.has(step.id || "") })));
  }

  showSources(sources) {
    this.extras.querySelector(".message-sources")?.remove();
    if (sources.length) this.extras.append(sourceChips(sources));
  }

  async showAttachments(ids, known = []) {
    const list = h("ul", { class: "message-attachments", "aria-label": "Attachments" });
    this.extras.append(list);
    for (const id of ids) {
      const upload = known.find((item) => item.id === id) || await this.hooks.uploads.record(id);
      if (!upload) {
        list.append(h("li", { class: "muted" }, "A file that has been deleted"));
        continue;
      }
      const item = h("li", {}, h("span", { class: "attachment-name" }, upload.filename), " ",
        h("span", { class: "muted" }, formatSize(upload.size)));
      list.append(item);
      if (upload.is_image) {
        this.hooks.uploads.imageUrl(upload).then((url) => item.prepend(h("img", { src: url, alt: upload.filename, class: "thumb" })))
          .catch(() => {});
      }
    }
  }

  // complete (nothing shown), stopped (by the user), interrupted (the connection or the server was lost),
  // error (the model failed), streaming (still being written, seen from another page).
  setStatus(status) {
    this.element.classList.remove("streaming");
    this.element.dataset.status = status || "complete";
    if (status === "stopped" || status === "interrupted") {
      this.finished = true;
      cancelAnimationFrame(this.frame);
      this.renderBody();
    }
    const line = STATUS_LINES[status];
    this.statusLine.replaceChildren(...(line ? [h("span", { class: `badge ${line[0]}` }, line[1]), ` ${line[2]}`] : []));
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

const STATUS_LINES = {
  stopped: ["stopped", "Stopped", "The reply was stopped before it was finished."],
  interrupted: ["warning", "Interrupted", "The connection was lost before the reply was finished."],
  error: ["error", "Error", "The reply failed."],
  streaming: ["", "Writing", "This reply is still being written."],
};
