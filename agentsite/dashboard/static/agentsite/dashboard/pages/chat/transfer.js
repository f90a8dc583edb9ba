// Chats taken out and brought in: the Export menu of the open chat (GET /api/sessions/:id/export, Markdown
// for reading or JSON for importing again, each a download) and the Import button of the chat list (POST
// /api/sessions/import with an agentsite export or ChatGPT's conversations.json). The file is read and sent
// as it is; the server checks it and stores all of it or nothing, and its error says where the file is wrong.
import { h } from "../../ui.js";

const FORMATS = [["markdown", "Markdown", "md"], ["json", "JSON", "json"]];
const IMPORT_MAX_BYTES = 20 * 1024 * 1024; // docs/api.md: the import path's body limit

// options: ctx (the page's), sessionId() -> the open chat's id (or null), onImported() once chats were added.
export class ChatTransfer {
  constructor({ ctx, sessionId, onImported }) {
    Object.assign(this, { ctx, sessionId, onImported });
    this.menu = h("details", { class: "chat-export" }, h("summary", { "aria-label": "Export this chat" }, "Export"),
      h("div", { class: "chat-export-menu", role: "group", "aria-label": "Export formats" },
        FORMATS.map(([format, label, extension]) => h("button", { type: "button", class: "small",
          onclick: () => this.download(format, extension) }, label))));
    this.file = h("input", { type: "file", accept: ".json,application/json", class: "visually-hidden",
      "aria-label": "Chats file to import", onchange: () => this.upload() });
    this.result = h("p", { class: "chat-import-result", role: "status", "aria-live": "polite" });
    this.importer = h("div", { class: "chat-import" },
      h("button", { type: "button", class: "small", title: "An agentsite chat export, or ChatGPT's conversations.json",
        onclick: () => this.file.click() }, "Import chats"), this.file, this.result);
  }

  // The export of the open chat as a file, named as the server names it.
  async download(format, extension) {
    this.menu.open = false;
    const id = this.sessionId();
    if (!id) {
      this.ctx.toast("Send a message first: this chat has nothing to export yet.", "error");
      return;
    }
    try {
      const response = await this.ctx.api(`/api/sessions/${encodeURIComponent(id)}/export?format=${format}`,
        { raw: true });
      const named = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
      const url = URL.createObjectURL(await response.blob());
      const link = h("a", { href: url, download: named ? named[1] : `chat.${extension}`, hidden: true });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 1000);
    } catch (error) {
      this.ctx.toast(`The chat could not be exported: ${error.message}`, "error");
    }
  }

  async upload() {
    const file = this.file.files?.[0];
    this.file.value = "";
    if (!file) return;
    this.result.className = "chat-import-result";
    if (file.size > IMPORT_MAX_BYTES) {
      this.show(`${file.name} is larger than 20 MB: import it in parts.`, true);
      return;
    }
    let parsed;
    try {
      parsed = JSON.parse(await file.text());
    } catch {
      this.show(`${file.name} is not a JSON file.`, true);
      return;
    }
    this.show(`Importing ${file.name}…`);
    try {
      const answer = await this.ctx.api("/api/sessions/import", { method: "POST", body: parsed });
      this.show(answer.count === 1 ? "Imported 1 chat." : `Imported ${answer.count} chats.`);
      this.onImported(answer.imported);
    } catch (error) {
      const where = Object.keys(error.details || {})[0];
      this.show(`Not imported: ${error.message}${where && !error.message.includes(where) ? ` (${where})` : ""}`, true);
    }
  }

  show(text, failed = false) {
    this.result.textContent = text;
    this.result.classList.toggle("form-error", failed);
  }
}
