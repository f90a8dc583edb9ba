// The chat's messages as the log shows them (see MessageView), and the uploads they show (see Uploads).
import { listAll } from "../../api.js";
import { formatSize, h, renderMarkdown } from "../../ui.js";

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

// One message in the log: its Markdown body, attachments, folded tool calls and sources, and its state.
// hooks (the page's, shared by its messages): uploads (an Uploads), readAloud(view, button), scrollDown().
export class MessageView {
  constructor(role, hooks) {
    this.hooks = hooks;
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
      const read = h("button", { type: "button", class: "small read-aloud", onclick: () => hooks.readAloud(this, read) },
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
      this.hooks.scrollDown();
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
