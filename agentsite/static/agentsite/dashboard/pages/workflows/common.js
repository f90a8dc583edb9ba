// Small pieces the Scheduler, Workflows, MCP and Settings pages share: error wording from an ApiError,
// labelled fields, times in a zone, loading and problem boxes. (It lives under pages/workflows/ because
// that folder is where this part of the dashboard keeps its extra modules.)
import * as apiModule from "../../api.js";
import * as ui from "../../ui.js";

// The shell's helpers (ui.js, api.js), taken through namespace imports so that a helper the shell lacks
// falls back here instead of failing the whole page at load.
export const h = ui.h;

export function confirmDialog(message, options = {}) {
  if (typeof ui.confirmDialog === "function") return Promise.resolve(ui.confirmDialog(message, options));
  return Promise.resolve(window.confirm(message));
}

export function stream(path, options) {
  return apiModule.stream(path, options);
}

let fieldCount = 0;

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

// A labelled control (the label names it, so tests and screen readers find it by its label).
export function field(label, control, ...extra) {
  if (!control.id) control.id = `field-${++fieldCount}`;
  const help = extra.filter(Boolean);
  const ids = help.map((element) => {
    if (!element.id) element.id = `field-help-${++fieldCount}`;
    return element.id;
  });
  if (ids.length) {
    const described = control.getAttribute("aria-describedby");
    control.setAttribute("aria-describedby", [described, ...ids].filter(Boolean).join(" "));
  }
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control, ...help);
}

// Replace an element's children, leaving out null, undefined and false (which replaceChildren would
// otherwise turn into the text "null").
export function put(element, ...children) {
  element.replaceChildren(...children.flat(Infinity).filter((child) => child !== null && child !== undefined && child !== false));
  return element;
}

// A field's help text (field() links it to the control with aria-describedby).
export function hint(text) {
  return h("p", { class: "hint" }, text);
}

export function checkbox(label, input) {
  if (!input.id) input.id = `field-${++fieldCount}`;
  return h("div", { class: "field check" }, input, h("label", { for: input.id }, label));
}

export function formatTime(iso, zone) {
  if (!iso) return "";
  const date = new Date(iso);
  try {
    return new Intl.DateTimeFormat(undefined, { weekday: "short", year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", timeZone: zone || undefined, timeZoneName: "short" }).format(date);
  } catch {
    return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }
}

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

// The shell's loading indicator and error box (role=status / role=alert).
export function loading(text = "Loading…") {
  return ui.loading(text);
}

export function problemBox(text, retry) {
  return ui.errorBox(text, retry);
}

export function pageHeader(title, summary) {
  return h("header", { class: "page-header" }, h("h1", {}, title), summary ? h("p", { class: "summary" }, summary) : null);
}

// Save a JSON value as a file the browser downloads.
export function download(filename, value) {
  const blob = new Blob([`${JSON.stringify(value, null, 2)}\n`], { type: "application/json" });
  const url = URL.createObjectURL(blob);
  const link = h("a", { href: url, download: filename, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
