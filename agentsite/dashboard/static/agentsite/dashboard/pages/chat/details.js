// What a message shows besides its text: when it was written, which model and agent answered with how many
// tokens and how soon, the knowledge passages it used (numbered chips that open the passage in a dialog), and
// its tool steps (folded rows). Everything here is a record's data shown as text (textContent), never as HTML.
import { formatTime, h } from "../../ui.js";

const SHORT_TIME = new Intl.DateTimeFormat(undefined, { hour: "numeric", minute: "2-digit" });
const SHORT_DAY = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "numeric", minute: "2-digit" });
let dialogs = 0; // ids for the passage dialogs' headings

// <time> of an ISO moment: the time alone today, the day too before; the full date as its title.
export function timeElement(iso) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return null;
  const today = date.toDateString() === new Date().toDateString();
  return h("time", { datetime: date.toISOString(), title: formatTime(iso), class: "message-time" },
    (today ? SHORT_TIME : SHORT_DAY).format(date));
}

// A reply's details as short labelled phrases: model, agent, tokens, time to first token, and an unusual end.
export function replyFacts(record) {
  const facts = [];
  if (record.model) facts.push(["Model", record.model]);
  if (record.agent) facts.push(["Agent", record.agent]);
  const usage = record.usage || {};
  if (Number.isFinite(usage.total_tokens) && usage.total_tokens > 0) {
    const parts = [`${usage.prompt_tokens ?? 0} in`, `${usage.completion_tokens ?? 0} out`];
    facts.push(["Tokens", `${usage.total_tokens} (${parts.join(", ")})${usage.estimated ? ", estimated" : ""}`]);
  }
  if (Number.isFinite(record.ttft_ms)) facts.push(["First token", duration(record.ttft_ms)]);
  if (record.finish_reason && !["stop", "tool_calls", ""].includes(record.finish_reason)) {
    facts.push(["Ended", record.finish_reason === "length" ? "at the length limit" : record.finish_reason]);
  }
  return facts.map(([label, value]) => h("span", { class: "fact" }, h("span", { class: "fact-label" }, `${label}: `), value));
}

function duration(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

// --- tool steps ---

// One step as a folded row: its name, ok / error / running, and its duration; open: arguments and result.
// step: {name, arguments, result, is_error, duration_ms}; running: a live call whose result has not come.
export function stepRow(step, { running = false, open = false } = {}) {
  const finished = step.result !== null && step.result !== undefined;
  const state = running ? "running" : !finished ? "unfinished" : step.is_error ? "error" : "ok";
  const badge = { running: "running…", unfinished: "did not finish", error: "error", ok: "ok" }[state];
  return h("details", { class: `tool-call step step-${state}`, open, dataset: { stepId: step.id || "" } },
    h("summary", {}, h("code", { class: "step-name" }, step.name || "tool"), " ",
      h("span", { class: `badge ${state === "ok" ? "ok" : state === "error" ? "error" : ""}` }, badge),
      Number.isFinite(step.duration_ms) ? h("span", { class: "step-duration" }, duration(step.duration_ms)) : null,
      running && step.progress ? h("span", { class: "step-progress", role: "status" }, step.progress) : null),
    h("p", { class: "tool-label" }, "Arguments"), h("pre", { class: "step-arguments" }, pretty(step.arguments ?? {})),
    h("p", { class: "tool-label" }, "Result"),
    h("pre", { class: "step-result" }, finished ? pretty(step.result) : running ? "Running…" : "No result."));
}

// JSON pretty-printed (a string that holds JSON too); any other string as it is.
function pretty(value) {
  if (typeof value === "string") {
    try {
      const parsed = JSON.parse(value);
      if (parsed && typeof parsed === "object") return JSON.stringify(parsed, null, 2);
    } catch {
      // Not JSON: the text itself.
    }
    return value;
  }
  return JSON.stringify(value, null, 2) ?? String(value);
}

// --- sources ---

// The numbered chips of a reply's sources, [1] filename, each opening its passage.
export function sourceChips(sources) {
  const label = h("p", { class: "sources-label", id: `sources-${++dialogs}` }, "Sources");
  return h("div", { class: "message-sources" }, label,
    h("ol", { class: "source-chips", "aria-labelledby": label.id }, sources.map((source, index) => {
      const chip = h("button", { type: "button", class: "source-chip", "aria-haspopup": "dialog",
        onclick: () => openPassage(source, index + 1, chip) },
      h("span", { class: "source-number" }, `[${index + 1}]`), " ", filenameOf(source));
      return h("li", {}, chip);
    })));
}

function filenameOf(source) {
  return source?.document?.filename || source?.filename || "document";
}

// The passage a source names, in a modal dialog: its text as the model received it, its document, collection,
// part and score. Escape, Close or a click outside closes it, and the focus goes back to the chip.
function openPassage(source, number, opener) {
  const title = h("h2", { id: `passage-${++dialogs}` }, `[${number}] ${filenameOf(source)}`);
  const facts = [source.collection?.name ? `Collection: ${source.collection.name}` : null,
    Number.isInteger(source.chunk_index) ? `Part ${source.chunk_index + 1}` : null,
    Number.isFinite(source.score) ? `Score ${source.score.toFixed(3)}` : null].filter(Boolean);
  const close = h("button", { type: "button" }, "Close");
  const dialog = h("dialog", { class: "passage", "aria-labelledby": title.id }, title,
    h("p", { class: "passage-facts" }, facts.join(" · ")),
    h("blockquote", { class: "passage-text" }, source.text || "(The passage's text was not recorded.)"),
    h("div", { class: "actions" }, close));
  close.addEventListener("click", () => dialog.close());
  dialog.addEventListener("click", (event) => {
    if (event.target === dialog) dialog.close();
  });
  dialog.addEventListener("close", () => {
    dialog.remove();
    opener.focus();
  });
  document.body.append(dialog);
  dialog.showModal();
  close.focus();
}
