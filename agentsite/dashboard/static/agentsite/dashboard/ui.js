// The helpers the pages share (with api.js, the shell's): DOM building, Markdown, feedback (loading, errors,
// confirmation), labelled fields, times. A helper two pages need lives here, once. Text always goes in as
// text (textContent, attributes): nothing here parses untrusted HTML except renderMarkdown, and that only
// through DOMPurify.
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

// The one class kept: a fenced code block's language (marked's class="language-x" on <code>), which the chat's
// highlighter reads; the value is checked here, since FORBID_ATTR's check is skipped for it.
DOMPurify.addHook("uponSanitizeAttribute", (node, data) => {
  if (data.attrName === "class" && node.nodeName === "CODE" && /^language-[\w#+.-]{1,40}$/.test(data.attrValue)) {
    data.forceKeepAttr = true;
  }
});

// Markdown text (from a model or a user) as a sanitised DocumentFragment: no script, no event handler
// attribute, no javascript: (or other non-web) URL survives.
export function renderMarkdown(text) {
  const html = marked.parse(String(text ?? ""), { async: false, gfm: true, breaks: true });
  return DOMPurify.sanitize(html, PURIFY);
}

// What a vendored renderer (highlight.js, KaTeX) makes of a message's text: spans with the renderer's classes,
// MathML, the SVG of stretchy symbols, and inline sizes. Sanitised by a DOMPurify instance of its own (hooks are
// per instance) that keeps only those tags and attributes: no link, image, handler or URL. Of a style only the
// layout properties KaTeX sets are kept, with plain values (no url(), no function at all), and put back through
// the CSSOM: the page's policy (no 'unsafe-inline' style) refuses style attributes, even in markup only parsed,
// and not the CSSOM. So markup with styles comes as DOM built by the renderer (sanitised in place), not as HTML.
const RENDERED = {
  RETURN_DOM_FRAGMENT: true,
  ALLOWED_TAGS: ["span", "br", "svg", "path", "line", "math", "semantics", "annotation", "mrow", "mi", "mn", "mo",
    "ms", "mtext", "mspace", "mfrac", "msqrt", "mroot", "msub", "msup", "msubsup", "munder", "mover", "munderover",
    "mtable", "mtr", "mtd", "mlabeledtr", "mstyle", "mpadded", "mphantom", "menclose", "merror"],
  ALLOWED_ATTR: ["class", "aria-hidden", "title", "width", "height", "viewbox", "preserveaspectratio", "d",
    "x1", "x2", "y1", "y2", "stroke-width", "encoding", "display", "mathvariant", "mathcolor", "mathbackground",
    "mathsize", "accent", "accentunder", "columnalign", "columnlines", "columnspacing", "rowlines", "rowspacing",
    "depth", "voffset", "lspace", "rspace", "displaystyle", "scriptlevel", "fence", "separator", "stretchy",
    "largeop", "linebreak", "linethickness", "minsize", "maxsize", "notation"],
  ALLOW_DATA_ATTR: false,
};
const LAYOUT_STYLE = new Set(["background-color", "border-bottom-width", "border-color", "border-right-style",
  "border-right-width", "border-style", "border-top-width", "border-width", "bottom", "color", "height", "left",
  "margin", "margin-left", "margin-right", "margin-top", "min-width", "padding-left", "position", "text-shadow", "top",
  "vertical-align", "width"]);
const layouts = new WeakMap(); // element -> the [property, value] pairs kept of its style attribute
const rendered = DOMPurify(window);
rendered.addHook("uponSanitizeAttribute", (node, data) => {
  if (data.attrName !== "style") return;
  data.keepAttr = false;
  layouts.set(node, data.attrValue.split(";").map((part) => part.split(":").map((side) => side.trim().toLowerCase()))
    .filter(([name, value, ...rest]) => LAYOUT_STYLE.has(name) && /^[-\w\s.,%#]+$/.test(value ?? "") && !rest.length
      && (name !== "position" || value === "relative")));
});

// markup: an HTML string (sanitised into a new DocumentFragment) or a detached element (sanitised in place);
// returns the sanitised fragment or element.
export function sanitizeRendered(markup) {
  const clean = typeof markup === "string" ? rendered.sanitize(markup, RENDERED)
    : rendered.sanitize(markup, { ...RENDERED, IN_PLACE: true });
  for (const element of [clean, ...clean.querySelectorAll("*")]) {
    for (const [name, value] of layouts.get(element) || []) element.style.setProperty(name, value);
  }
  return clean;
}

// --- feedback ---

// A spinner and a line of text, announced politely (role=status) while something loads.
export function loading(text = "Loading…") {
  return h("p", { class: "loading", role: "status", "aria-live": "polite" },
    h("span", { class: "spinner", "aria-hidden": "true" }), ` ${text}`);
}

// An error that stays on the page (role=alert), with an optional "Try again" button.
export function errorBox(message, retry) {
  return h("div", { class: "error-box", role: "alert" }, h("p", {}, String(message)),
    retry ? h("button", { type: "button", onclick: retry }, "Try again") : null);
}

// The sentence to show for a failed call: the envelope's message, plus the per-field messages it names.
export function errorText(error) {
  if (!error) return "Something went wrong.";
  const fields = fieldErrors(error);
  const parts = Object.entries(fields)
    .filter(([, messages]) => messages.length)
    .map(([name, messages]) => `${name}: ${messages.join(" ")}`);
  const message = error.message || String(error);
  if (!parts.length) return message;
  // The envelope's message often repeats the first field's message: say each thing once.
  const rest = parts.filter((part) => !message.includes(part.slice(part.indexOf(": ") + 2)));
  return rest.length ? `${message} (${rest.join("; ")})` : message;
}

// details as {field: [messages]} when the error is a 400 naming fields, else {}.
export function fieldErrors(error) {
  const details = error?.details;
  if (!details || typeof details !== "object" || Array.isArray(details)) return {};
  const fields = {};
  for (const [name, value] of Object.entries(details)) {
    if (Array.isArray(value)) fields[name] = value.map(String);
    else if (typeof value === "string") fields[name] = [value];
  }
  return fields;
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

// --- forms and layout ---

let controls = 0;

// A labelled control: the label names it, so people, screen readers and tests find it by that name. Help
// follows the control, each piece a string (shown as a hint) or an element (hint(), a checkbox...), and is
// linked to it with aria-describedby; null and false are left out.
export function field(label, control, ...help) {
  if (!control.id) control.id = `control-${++controls}`;
  const notes = help.filter((item) => item !== null && item !== undefined && item !== false)
    .map((item) => (item instanceof Node ? item : hint(item)));
  for (const note of notes) if (!note.id) note.id = `control-help-${++controls}`;
  if (notes.length) {
    const described = control.getAttribute("aria-describedby");
    control.setAttribute("aria-describedby", [described, ...notes.map((note) => note.id)].filter(Boolean).join(" "));
  }
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control, ...notes);
}

// A field's help text (field() links it to its control).
export function hint(text) {
  return h("p", { class: "hint" }, text);
}

// A checkbox with its label after it.
export function checkbox(label, input) {
  if (!input.id) input.id = `control-${++controls}`;
  return h("div", { class: "field check" }, input, h("label", { for: input.id }, label));
}

// Each body cell of a table gets its column's name (data-label), which a page's CSS shows before the cell
// where the table becomes a list of cards (a phone).
export function labelCells(table) {
  const labels = [...table.tHead.rows[0].cells].map((cell) => cell.textContent.trim());
  for (const row of table.tBodies[0].rows) {
    [...row.cells].forEach((cell, index) => { if (cell.tagName === "TD") cell.dataset.label = labels[index] ?? ""; });
  }
}

// A value to copy (a URL, a secret shown once): a read-only input named `label`, its Copy button (named
// `buttonLabel` where several are on a page) and a role=status line saying whether the clipboard took it (when
// the browser refuses, the value is selected to copy by hand). The page places the three.
export function copyField(value, label, { buttonLabel = null, inputClass = "", primary = true } = {}) {
  const input = h("input", { class: ["mono", inputClass], readonly: true, value, "aria-label": label });
  const status = h("span", { class: "form-ok", role: "status" });
  const button = h("button", { type: "button", class: primary ? "primary" : null, "aria-label": buttonLabel,
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(value);
        status.textContent = "Copied.";
      } catch {
        input.select();
        status.textContent = "Select and copy it by hand (the browser refused the clipboard).";
      }
    } }, "Copy");
  return { input, button, status };
}

// Who may use one of the deployment's resources (an MCP server, a remote A2A agent), as its access rule says
// (admins see the rule): admins, and everyone or the grants.
export function usedBy(resource) {
  if (resource.visibility === "everyone") return "everyone";
  const granted = (resource.grants || []).map((grant) => (grant.group !== undefined ? `group ${grant.name}` : grant.name));
  return ["admins", ...(resource.visibility === "shared" ? granted : [])].join(", ");
}

export function pageHeader(title, summary) {
  return h("header", { class: "page-header" }, h("h1", {}, title), summary ? h("p", { class: "summary" }, summary) : null);
}

// Replace an element's children, leaving out null, undefined and false (which replaceChildren would
// otherwise turn into the text "null").
export function put(element, ...children) {
  element.replaceChildren(...children.flat(Infinity).filter((child) => child !== null && child !== undefined && child !== false));
  return element;
}

// --- times and sizes ---

// A moment for people: in their own zone ("Nov 25, 2026, 9:00 AM"), or, given a time zone, in that zone
// with the weekday and the zone's name (a cron task's times, where the weekday matters).
export function formatTime(iso, zone) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  if (!zone) return new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" }).format(date);
  try {
    return new Intl.DateTimeFormat(undefined, { weekday: "short", year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", timeZone: zone, timeZoneName: "short" }).format(date);
  } catch {
    // A zone this browser does not know: UTC, said so.
    return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }
}

// The IANA time zones this browser knows, UTC first.
export function timeZones() {
  try {
    return ["UTC", ...Intl.supportedValuesOf("timeZone").filter((zone) => zone !== "UTC")];
  } catch {
    return ["UTC"];
  }
}

export function localZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  } catch {
    return "UTC";
  }
}

export function formatSize(bytes) {
  if (!Number.isFinite(bytes)) return "";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}
