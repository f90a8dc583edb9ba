// The composer: the message box (Enter sends, Shift+Enter starts a new line), files attached (or dropped)
// and uploaded at once to /api/upload, dictation into the box, and the Send and Stop buttons.
import { formatSize, h } from "../../ui.js";
import { Dictation } from "./voice.js";

// options: ctx (the page's), voiceConfig() -> Promise of /api/config (for the speech-to-text provider),
// onSend(), onStop(). The page reads `text`, `uploading` and uploaded(), and clears it once a message is sent.
export class Composer {
  constructor({ ctx, voiceConfig, onSend, onStop }) {
    Object.assign(this, { ctx, voiceConfig, onSend, onStop });
    this.pending = []; // attachments: {file, upload?, error?, element}
    this.dictation = null;
    this.stopped = false;
    this.element = this.build();
  }

  build() {
    this.input = h("textarea", { id: "chat-message", rows: "3", placeholder: "Ask anything… (Enter sends, Shift+Enter starts a new line)",
      "aria-describedby": "chat-composer-help", onkeydown: (event) => this.onKey(event) });
    this.fileInput = h("input", { type: "file", multiple: true, hidden: true, tabindex: "-1",
      onchange: () => { this.attach([...this.fileInput.files]); this.fileInput.value = ""; } });
    this.attachments = h("ul", { class: "chat-attachments", "aria-label": "Files to send" });
    this.error = h("div", { class: "form-error", role: "alert" });
    this.sendButton = h("button", { type: "submit", class: "primary" }, "Send");
    this.stopButton = h("button", { type: "button", class: "danger", hidden: true, onclick: () => this.onStop() },
      "Stop");
    this.micButton = h("button", { type: "button", "aria-pressed": "false", onclick: () => this.toggleDictation() },
      "Dictate");
    return h("form", { class: "chat-composer", onsubmit: (event) => { event.preventDefault(); this.onSend(); },
      ondragover: (event) => event.preventDefault(),
      ondrop: (event) => { event.preventDefault(); this.attach([...(event.dataTransfer?.files || [])]); } },
    h("label", { for: "chat-message", class: "visually-hidden" }, "Message"),
    this.input,
    h("p", { id: "chat-composer-help", class: "visually-hidden" }, "Enter sends; Shift+Enter starts a new line."),
    this.attachments, this.error,
    h("div", { class: "actions" },
      h("button", { type: "button", onclick: () => this.fileInput.click() }, "Attach files"), this.fileInput,
      this.micButton,
      h("span", { class: "spacer" }), this.stopButton, this.sendButton));
  }

  stop() {
    this.stopped = true;
    this.dictation?.cancel();
  }

  get text() {
    return this.input.value;
  }

  // Whether an attachment is still uploading.
  get uploading() {
    return this.pending.some((item) => !item.upload && !item.error);
  }

  // The upload records of the attachments that uploaded (a failed one is left out).
  uploaded() {
    return this.pending.filter((item) => item.upload).map((item) => item.upload);
  }

  showError(message) {
    this.error.textContent = message;
  }

  // A problem with the microphone or a voice provider: on the composer, and as a toast.
  problem(message) {
    this.showError(message);
    this.ctx.toast(message, "error");
  }

  clear() {
    this.input.value = "";
    this.pending = [];
    this.attachments.replaceChildren();
  }

  // While a reply streams: Stop instead of Send, and the focus goes with it.
  setBusy(busy) {
    this.sendButton.disabled = busy;
    this.stopButton.hidden = !busy;
    if (busy) this.stopButton.focus();
    else if (document.activeElement === this.stopButton || document.activeElement === document.body) this.input.focus();
  }

  onKey(event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !event.ctrlKey && !event.altKey) {
      event.preventDefault();
      this.onSend();
    }
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

  // --- dictation ---

  async toggleDictation() {
    if (this.dictation) return this.finishDictation();
    this.showError("");
    const config = await this.voiceConfig();
    const dictation = new Dictation({ api: this.ctx.api, provider: config.stt_provider });
    try {
      await dictation.start();
    } catch (error) {
      this.problem(error.message);
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
      this.problem(`Dictation failed: ${error.message}`);
    } finally {
      this.micButton.textContent = "Dictate";
      this.micButton.disabled = false;
      this.micButton.setAttribute("aria-pressed", "false");
    }
  }
}
