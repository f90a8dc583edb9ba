// The conversation's branches in the log: the selected path of the chat's Tree, one MessageView a message,
// and under each message its controls: "‹ 2/3 ›" between its siblings (switching selects that branch on
// the server, PATCH /api/sessions/:id {current}), Edit on a question (an inline editor; Save sends the new
// text as a sibling question) and Regenerate on a reply (a new sibling reply). The page runs the turns that
// Edit and Regenerate start (onEdit, onRegenerate). Invariant: the log shows exactly tree.path(), one view
// per message in that order, while no reply streams; a turn appends to it (cutFrom, then the new views).
import { h } from "../../ui.js";
import { MessageView } from "./message.js";
import { Tree } from "./tree.js";

// options: ctx, log (the element), hooks (what a MessageView may call back), sessionId() -> the chat's id,
// onEdit(message, text), onRegenerate(message).
export class Branches {
  constructor(options) {
    Object.assign(this, options);
    this.tree = new Tree();
    this.views = new Map(); // message id -> MessageView shown
    this.busy = false;
    this.editing = null; // the inline editor open: {id, close()}
    this.switching = false; // a PATCH selecting a branch is under way
  }

  show(tree) {
    this.tree = tree;
    this.render();
  }

  render() {
    this.editing?.close();
    this.views.clear();
    this.log.replaceChildren();
    for (const message of this.tree.path()) this.log.append(this.storedView(message).element);
  }

  // A stored message (or one the page just streamed), as the log shows it.
  storedView(message) {
    const view = new MessageView(message.role, this.hooks);
    view.setContent(message.content);
    if (message.attachments?.length) view.showAttachments(message.attachments);
    view.setRecord(message); // its details, tool steps and sources
    showStatus(view, message.status);
    this.attach(message.id, view);
    return view;
  }

  // Gives a view shown in the log its message id and its controls.
  attach(id, view) {
    view.element.dataset.messageId = id;
    this.views.set(id, view);
    this.drawControls(id);
  }

  drawControls(id) {
    const view = this.views.get(id);
    const message = this.tree.get(id);
    if (!view || !message) return;
    view.branchBar?.remove();
    const siblings = this.tree.siblings(id);
    const at = siblings.indexOf(id);
    const disabled = this.busy;
    const bar = h("div", { class: "message-branches" });
    if (siblings.length > 1) {
      const what = message.role === "user" ? "question" : "reply";
      const step = (delta, sign, label) => h("button", { type: "button", class: "small branch-control branch-step",
        "aria-label": `${label} ${what}`, dataset: { step: String(delta) },
        disabled: disabled || !siblings[at + delta], onclick: () => this.switchTo(siblings[at + delta], delta) }, sign);
      const where = `${what[0].toUpperCase()}${what.slice(1)} ${at + 1} of ${siblings.length}`;
      bar.append(h("span", { class: "branch-nav", role: "group", "aria-label": where },
        step(-1, "‹", "Previous"), h("span", { class: "branch-position" }, `${at + 1}/${siblings.length}`),
        step(1, "›", "Next")));
    }
    if (message.role === "user") {
      bar.append(h("button", { type: "button", class: "small branch-control branch-edit", disabled,
        onclick: () => this.edit(id) }, "Edit"));
    } else if (message.role === "assistant") {
      bar.append(h("button", { type: "button", class: "small branch-control branch-regenerate", disabled,
        onclick: () => this.onRegenerate(message) }, "Regenerate"));
    }
    view.branchBar = bar;
    view.actions.prepend(bar);
  }

  // While a reply streams, no branch can be switched, edited or regenerated.
  setBusy(busy) {
    this.busy = busy;
    for (const id of this.views.keys()) this.drawControls(id);
  }

  // Selects the branch through `id` (a sibling of a message shown); the server answers the path's new end.
  // The message switched stays where it was on screen, and the focus on the arrow just used (on the other
  // one once the end is reached).
  async switchTo(id, delta) {
    if (this.busy || this.switching || !id) return;
    this.switching = true; // a second click while the first is answered would switch from a stale path
    try {
      const session = await this.ctx.api(`/api/sessions/${encodeURIComponent(this.sessionId())}`,
        { method: "PATCH", body: { current: id } });
      this.tree.current = session.current;
    } catch (error) {
      this.ctx.toast(`That version could not be shown: ${error.message}`, "error");
      return;
    } finally {
      this.switching = false;
    }
    const top = this.views.get(this.tree.siblings(id).find((other) => this.views.has(other)))
      ?.element.getBoundingClientRect().top;
    this.render();
    const shown = this.views.get(id);
    if (shown && top !== undefined) this.log.scrollTop += shown.element.getBoundingClientRect().top - top;
    const bar = shown?.branchBar;
    const arrows = [...(bar?.querySelectorAll(".branch-step") || [])];
    (arrows.find((arrow) => arrow.dataset.step === String(delta) && !arrow.disabled) || arrows.find((a) => !a.disabled))
      ?.focus();
  }

  // Removes the view of `id` and every one after it from the log: a new branch replaces them.
  cutFrom(id) {
    this.editing?.close();
    const view = this.views.get(id);
    if (!view) return;
    let shown = false;
    for (const [other, each] of [...this.views]) {
      shown ||= other === id;
      if (shown) {
        each.element.remove();
        this.views.delete(other);
      }
    }
  }

  // A turn's `start`: its question (when it sent one) and its reply are stored; they become the path's end.
  started(data, question) {
    if (data.user_message_id && question) {
      this.tree.add({ id: data.user_message_id, parent: question.parent, role: "user", content: question.text,
        attachments: question.attachments, status: "complete" });
      this.attach(data.user_message_id, question.view);
    }
    this.tree.add({ id: data.message_id, parent: data.parent ?? data.user_message_id ?? null, role: "assistant",
      content: "", status: "streaming" });
    this.tree.current = data.message_id;
  }

  // A turn's `done`: the reply as stored (its status `complete` or `stopped`).
  finished(data, view) {
    this.tree.update(data.message_id, { ...data, id: data.message_id, status: data.status || "complete" });
    view.setRecord(data);
    showStatus(view, data.status || "complete");
    this.drawControls(data.message_id);
  }

  // --- editing a question ---

  editLast() {
    const last = this.tree.lastQuestion();
    if (!last || this.busy || !this.views.has(last.id)) return false;
    this.edit(last.id);
    return true;
  }

  edit(id) {
    const view = this.views.get(id);
    const message = this.tree.get(id);
    if (!view || !message || this.busy) return;
    this.editing?.close();
    const input = h("textarea", { class: "message-edit-input", rows: "3", "aria-label": "Edit your message",
      onkeydown: (event) => {
        if (event.key === "Escape") {
          event.preventDefault();
          event.stopPropagation();
          close(true);
        } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !event.ctrlKey && !event.altKey) {
          event.preventDefault();
          save();
        }
      } });
    input.value = message.content || "";
    const problem = h("div", { class: "form-error", role: "alert" });
    const form = h("form", { class: "message-edit", onsubmit: (event) => { event.preventDefault(); save(); } },
      input, problem, h("div", { class: "actions" },
        h("button", { type: "button", onclick: () => close(true) }, "Cancel"),
        h("button", { type: "submit", class: "primary" }, "Save")));
    const close = (refocus) => {
      form.remove();
      view.body.hidden = false;
      view.actions.hidden = false;
      if (this.editing?.id === id) this.editing = null;
      if (refocus) view.branchBar?.querySelector(".branch-edit")?.focus();
    };
    const save = () => {
      problem.textContent = !input.value.trim() ? "Write a message first."
        : this.busy ? "Wait until the reply being written has finished." : "";
      if (problem.textContent) return;
      close(false);
      this.onEdit(message, input.value);
    };
    view.body.hidden = true;
    view.actions.hidden = true;
    view.body.after(form);
    this.editing = { id, close };
    input.focus();
    input.setSelectionRange(input.value.length, input.value.length);
  }
}

// A message's status line; `stopped` gets its own words unless the view already says it.
function showStatus(view, status) {
  view.setStatus(status);
  if (status === "stopped" && !view.statusLine.childNodes.length) {
    view.statusLine.replaceChildren(h("span", { class: "badge" }, "Stopped"), " You stopped this reply.");
  }
}
