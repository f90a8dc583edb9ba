// Small DOM helpers every page uses. Text always goes in as text (textContent, attributes): nothing here
// parses untrusted HTML except renderMarkdown, and that only through DOMPurify.
import { marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";

// Properties rather than attributes: they hold the live state of form controls.
const PROPERTIES = new Set(["value", "checked", "selected", "indeterminate"]);

// h("button", {class: "primary", onclick: fn, "aria-label": "Close"}, "Text", childElement, null, [more])
// attrs: on<event> functions become listeners; true/false/null booleans set or leave out the attribute;
// `dataset` is an object of data-* values. Children: nodes, strings (as text), arrays, null/false skipped.
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  append(element, children);
  for (const [name, value] of Object.entries(attrs || {})) setAttr(element, name, value);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else element.append(child instanceof Node ? child : String(child));
  }
}

function setAttr(element, name, value) {
  if (value === null || value === undefined || value === false) {
    if (PROPERTIES.has(name) && name !== "value") element[name] = false;
    return;
  }
  if (name.startsWith("on") && typeof value === "function") {
    element.addEventListener(name.slice(2).toLowerCase(), value);
  } else if (name === "dataset") {
    Object.assign(element.dataset, value);
  } else if (PROPERTIES.has(name)) {
    element[name] = value;
  } else if (name === "class") {
    element.className = Array.isArray(value) ? value.filter(Boolean).join(" ") : value;
  } else {
    element.setAttribute(name, value === true ? "" : String(value));
  }
}

// --- Markdown ---

const PURIFY = {
  RETURN_DOM_FRAGMENT: true,
  // No forms, styles or embedded documents from a reply: they could imitate the dashboard or reach out.
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "svg", "math"],
  FORBID_ATTR: ["style", "class", "id", "name"],
  // Links to the web and mail; images may also be data: (DOMPurify allows it on <img> only).
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#|\/(?!\/))/i,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
  if (node.tagName === "IMG") {
    node.setAttribute("loading", "lazy");
    node.setAttribute("referrerpolicy", "no-referrer");
  }
});

// Markdown text (from a model or a user) as a sanitised DocumentFragment: no script, no event handler
// attribute, no javascript: (or other non-web) URL survives.
export function renderMarkdown(text) {
  const html = marked.parse(String(text ?? ""), { async: false, gfm: true, breaks: true });
  return DOMPurify.sanitize(html, PURIFY);
}

// --- feedback ---

export function loading(text = "Loading…") {
  return h("p", { class: "loading", role: "status", "aria-live": "polite" },
    h("span", { class: "spinner", "aria-hidden": "true" }), ` ${text}`);
}

// An error that stays on the page (role=alert), with an optional "Try again" button.
export function errorBox(message, retry) {
  return h("div", { class: "error-box", role: "alert" }, h("p", {}, String(message)),
    retry ? h("button", { type: "button", onclick: retry }, "Try again") : null);
}

export function errorMessage(error) {
  if (!error) return "Something went wrong.";
  return error.message || String(error);
}

// A modal yes/no question; resolves true when confirmed. Escape, Cancel or a click outside answer false.
export function confirmDialog(message, { confirmLabel = "OK", cancelLabel = "Cancel", danger = true } = {}) {
  return new Promise((resolve) => {
    const previous = document.activeElement;
    const cancel = h("button", { type: "button", value: "cancel" }, cancelLabel);
    const ok = h("button", { type: "button", class: danger ? "danger" : "primary", value: "ok" }, confirmLabel);
    const text = h("p", { id: `confirm-${Date.now()}` }, message);
    const dialog = h("dialog", { class: "confirm", "aria-describedby": text.id }, text,
      h("div", { class: "actions" }, cancel, ok));
    const finish = (answer) => {
      dialog.close();
      dialog.remove();
      if (previous instanceof HTMLElement) previous.focus();
      resolve(answer);
    };
    cancel.addEventListener("click", () => finish(false));
    ok.addEventListener("click", () => finish(true));
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault();
      finish(false);
    });
    dialog.addEventListener("click", (event) => {
      if (event.target === dialog) finish(false);
    });
    document.body.append(dialog);
    dialog.showModal();
    cancel.focus();
  });
}

// A labelled control: the label names it, so people, screen readers and tests find it by that name.
let controls = 0;
export function field(label, control, hint) {
  if (!control.id) control.id = `control-${++controls}`;
  let help = null;
  if (hint) {
    help = h("p", { class: "hint", id: `${control.id}-hint` }, hint);
    control.setAttribute("aria-describedby", help.id);
  }
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control, help);
}

export function formatTime(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  return new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" }).format(date);
}

export function formatSize(bytes) {
  if (!Number.isFinite(bytes)) return "";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}
