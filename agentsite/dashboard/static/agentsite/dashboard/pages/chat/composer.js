// The composer: the message box (Enter sends, Shift+Enter starts a new line) with its draft kept per chat
// (drafts.js), files attached (picked, pasted, or dropped anywhere on the conversation) and uploaded at once
// to /api/upload, dictation into the box, and the Send and Stop buttons.
import { formatSize, h } from "../../ui.js";
import { Drafts } from "./drafts.js";
import { Dictation } from "./voice.js";

// The chat the address shows (#/chat/<id>), or null: the page keeps the address on the chat it shows.
function chatInAddress() {
  const found = /^#\/chat\/([^/?#]+)/.exec(location.hash);
  return found ? decodeURIComponent(found[1]) : null;
}

// options: ctx (the page's), voiceConfig() -> Promise of /api/config (for the speech-to-text provider),
// onSend(), onStop(), sessionId() -> the chat shown (null before it exists; default: the one in the address),
// whose draft the box holds. The page reads `text`, `uploading` and uploaded(), and clears it once a message
// is sent (which forgets the draft).
export class Composer {
  constructor({ ctx, voiceConfig, onSend, onStop, sessionId = chatInAddress }) {
    Object.assign(this, { ctx, voiceConfig, onSend, onStop, sessionId });
    this.pending = []; // attachments: {file, upload?, error?, element, preview?}
    this.dictation = null;
    this.stopped = false;
    this.drafts = new Drafts(ctx.user);
    this.element = this.build();
    this.draftOf = this.sessionId(); // the chat whose draft the box holds
    this.input.value = this.drafts.read(this.draftOf);
    this.listenForDrops();
  }

  build() {
    this.input = h("textarea", { id: "chat-message", rows: "3", placeholder: "Ask anything… (Enter sends, Shift+Enter starts a new line)",
      "aria-describedby": "chat-composer-help", onkeydown: (event) => this.onKey(event),
      oninput: () => this.saveDraft(), onpaste: (event) => this.onPaste(event) });
    this.fileInput = h("input", { type: "file", multiple: true, hidden: true, tabindex: "-1",
      onchange: () => { this.attach([...this.fileInput.files]); this.fileInput.value = ""; } });
    this.attachments = h("ul", { class: "chat-attachments", "aria-label": "Files to send" });
    this.error = h("div", { class: "form-error", role: "alert" });
    this.sendButton = h("button", { type: "submit", class: "primary" }, "Send");
    this.stopButton = h("button", { type: "button", class: "danger", hidden: true, onclick: () => this.onStop() },
      "Stop");
    this.micButton = h("button", { type: "button", "aria-pressed": "false", onclick: () => this.toggleDictation() },
      "Dictate");
    // Shown over the conversation while files are dragged over it (chat.css places it).
    this.dropHint = h("div", { class: "chat-drop-hint", hidden: true, "aria-hidden": "true" },
      "Drop files to attach them");
    return h("form", { class: "chat-composer", onsubmit: (event) => { event.preventDefault(); this.onSend(); } },
    h("label", { for: "chat-message", class: "visually-hidden" }, "Message"),
    this.input,
    h("p", { id: "chat-composer-help", class: "visually-hidden" }, "Enter sends; Shift+Enter starts a new line."),
    this.attachments, this.error,
    h("div", { class: "actions" },
      h("button", { type: "button", onclick: () => this.fileInput.click() }, "Attach files"), this.fileInput,
      this.micButton,
      h("span", { class: "spacer" }), this.stopButton, this.sendButton),
    this.dropHint);
  }

  stop() {
    this.stopped = true;
    this.dictation?.cancel();
    for (const [type, listener] of this.dropListeners) document.removeEventListener(type, listener);
    for (const item of this.pending) this.forgetPreview(item);
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
    this.drafts.remove(this.draftOf);
    this.drafts.remove(this.sessionId());
    for (const item of this.pending) this.forgetPreview(item);
    this.pending = [];
    this.attachments.replaceChildren();
  }

  // The box's text as the draft of the chat shown. Text carried into another chat (New chat keeps what was
  // typed) becomes that chat's draft and leaves the one it was written in.
  saveDraft() {
    const chat = this.sessionId();
    if (chat !== this.draftOf) this.drafts.remove(this.draftOf);
    this.draftOf = chat;
    this.drafts.write(chat, this.input.value);
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

  // Files dropped anywhere on the conversation (the page's .chat-main) are attached; while files are dragged
  // over it the drop hint shows. Elsewhere on the page a dropped file is refused rather than opened by the
  // browser in place of the dashboard.
  listenForDrops() {
    const carriesFiles = (event) => event.dataTransfer?.types?.includes("Files");
    const zone = () => this.element.closest(".chat-main") || this.element;
    const show = (on) => { this.dropHint.hidden = !on; };
    this.dropListeners = [
      ["dragover", (event) => {
        if (!carriesFiles(event)) return;
        event.preventDefault();
        const inside = zone().contains(event.target);
        event.dataTransfer.dropEffect = inside ? "copy" : "none";
        show(inside);
      }],
      ["dragleave", (event) => { if (!event.relatedTarget) show(false); }],
      ["dragend", () => show(false)],
      ["drop", (event) => {
        if (!carriesFiles(event)) return;
        event.preventDefault();
        show(false);
        if (zone().contains(event.target)) this.attach([...event.dataTransfer.files]);
      }],
    ];
    for (const [type, listener] of this.dropListeners) document.addEventListener(type, listener);
  }

  // Files pasted into the box (a screenshot, files copied in a file manager) are attached; text pasted with
  // them is still pasted.
  onPaste(event) {
    const files = [...(event.clipboardData?.files || [])];
    if (!files.length) return;
    if (!event.clipboardData.types.includes("text/plain")) event.preventDefault();
    this.attach(files);
  }

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
    const shown = this.pending.includes(item) && !item.error; // a detached one's preview is revoked already
    if (shown && item.file.type.startsWith("image/")) item.preview ??= URL.createObjectURL(item.file);
    else this.forgetPreview(item);
    const preview = item.preview ? [h("img", { src: item.preview, alt: name, class: "thumb" })] : [];
    item.element.replaceChildren(...preview, h("span", { class: "attachment-name" }, name), " ", state,
      h("button", { type: "button", class: "small", "aria-label": `Remove ${name}`, onclick: () => this.detach(item) }, "×"));
  }

  forgetPreview(item) {
    if (item.preview) URL.revokeObjectURL(item.preview);
    item.preview = null;
  }

  detach(item) {
    this.pending = this.pending.filter((other) => other !== item);
    this.forgetPreview(item);
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
      this.saveDraft();
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
