// A message's Markdown as the chat shows it: renderMarkdown (ui.js, the sanitising path) plus highlighted code
// blocks (the language shown, a Copy button) and typeset math (math.js finds it). highlight.js and KaTeX are
// vendored and loaded on first need (a message with a code block, or with math), never for the first paint;
// until one has loaded its part shows plain, and the caller's onLoaded renders the message again. Their output
// is markup made from untrusted text: it reaches the page only through sanitizeRendered (ui.js).
import { h, renderMarkdown, sanitizeRendered } from "../../ui.js";
import { protectMath, restoreMath } from "./math.js";

const KATEX_CSS = new URL("../../vendor/katex.min.css", import.meta.url).href;
// trust: false refuses \href, \url, \includegraphics, \htmlClass and the like. maxSize (ems: \rule{500em}...),
// maxExpand (macro expansions) and MAX_TEX (characters) bound what one formula may cost. throwOnError: true, caught
// below: KaTeX's own error box sets a style attribute, which the page's policy refuses (a console error), so a
// formula KaTeX cannot read shows as its source, marked, with KaTeX's reason as its title.
const KATEX_OPTIONS = { throwOnError: true, trust: false, strict: "ignore", maxSize: 25, maxExpand: 500,
  output: "htmlAndMathml" };
const MAX_TEX = 4000;
const MAX_HIGHLIGHT = 100_000; // characters of one code block; a longer one shows plain
// Rendered formulas and code blocks kept, each from at most MAX_CACHED characters: a streaming reply renders its
// finished ones again at every frame.
const CACHE_SIZE = 200;
const MAX_CACHED = 20_000;
const COPIED_MS = 1500;

const libraries = { hljs: null, katex: null };
const loads = {};
const cache = new Map();

function loadHighlighter() {
  loads.hljs ??= import("../../vendor/highlight.esm.js").then((module) => {
    libraries.hljs = module.default;
  });
  return loads.hljs;
}

// KaTeX's build is UMD: run as a module it defines globalThis.katex. Its stylesheet (and, through it, the fonts
// a formula uses) loads beside it; the formulas wait for both, so that they never show unstyled.
function loadKatex() {
  loads.katex ??= Promise.all([import("../../vendor/katex.min.js"), stylesheet(KATEX_CSS)]).then(() => {
    libraries.katex = globalThis.katex;
  });
  return loads.katex;
}

function stylesheet(href) {
  return new Promise((resolve, reject) => {
    document.head.append(h("link", { rel: "stylesheet", href, onload: resolve, onerror: reject }));
  });
}

// A library that failed to load leaves its part plain (the promise stays rejected: no retry loop).
function need(load, onLoaded) {
  load().then(onLoaded, () => {});
}

// Markdown source -> a DocumentFragment, as described above. onLoaded: called once a library this message needs
// has loaded (render again then).
export function renderMessageBody(source, onLoaded) {
  const { text, maths } = protectMath(source);
  const fragment = renderMarkdown(text);
  if (maths.length) {
    if (!libraries.katex) need(loadKatex, onLoaded);
    restoreMath(fragment, maths, mathNode);
  }
  const blocks = fragment.querySelectorAll("pre > code");
  if (blocks.length && !libraries.hljs) need(loadHighlighter, onLoaded);
  for (const code of blocks) decorateCode(code);
  return fragment;
}

function cached(key, make) {
  if (key.length > MAX_CACHED) return make();
  let template = cache.get(key);
  if (template) {
    cache.delete(key); // most recently used last
  } else {
    template = make();
    if (cache.size >= CACHE_SIZE) cache.delete(cache.keys().next().value);
  }
  cache.set(key, template);
  return template.cloneNode(true);
}

function mathNode(math) {
  const kind = math.display ? "math math-display" : "math math-inline";
  const katex = libraries.katex;
  if (!katex || math.tex.length > MAX_TEX) return h("span", { class: `${kind} math-source` }, math.raw);
  return cached(`${math.display ? "D" : "I"}${math.tex}`, () => {
    try {
      // Built as DOM (KaTeX sets its sizes through the CSSOM), then sanitised in place: see sanitizeRendered.
      const box = h("span", { class: kind });
      katex.render(math.tex, box, { ...KATEX_OPTIONS, displayMode: math.display });
      return sanitizeRendered(box);
    } catch (error) {
      return h("span", { class: `${kind} math-source math-error`, title: String(error?.message || error) }, math.raw);
    }
  });
}

// A code block: its language above it with a Copy button (the code exactly as written), highlighted when the
// language is one the highlighter knows.
function decorateCode(code) {
  const language = /^language-(.+)$/.exec(code.className)?.[1] || "";
  const source = code.textContent.replace(/\n$/, ""); // marked ends a block's code with a newline of its own
  const hljs = libraries.hljs;
  if (hljs && language && hljs.getLanguage(language) && source.length <= MAX_HIGHLIGHT) {
    const highlighted = cached(`C${language}\n${source}`, () => {
      const html = hljs.highlight(source, { language, ignoreIllegals: true }).value;
      return h("span", {}, sanitizeRendered(html));
    });
    code.replaceChildren(...highlighted.childNodes);
    code.classList.add("hljs");
  }
  const pre = code.parentElement;
  const block = h("div", { class: "code-block" },
    h("div", { class: "code-header" }, h("span", { class: "code-language" }, language || "text"),
      copyButton("Copy", "Copy code", () => source)));
  pre.replaceWith(block);
  block.append(pre);
}

// A button that puts text() on the clipboard and says so for a moment; name: its accessible name, when the label
// alone would not say what it copies.
export function copyButton(label, name, text) {
  const button = h("button", { type: "button", class: "small copy", "aria-label": name, onclick: async () => {
    const done = await copyText(text());
    button.textContent = done ? "Copied" : "Copy failed";
    setTimeout(() => { button.textContent = label; }, COPIED_MS);
  } }, label);
  return button;
}

// The Clipboard API where the page may use it (a secure context: HTTPS or this machine); elsewhere (a server
// reached over plain HTTP on the network) the older copy command on a selected, off-screen text area.
async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const previous = document.activeElement;
    const area = h("textarea", { class: "visually-hidden", readonly: true, "aria-hidden": "true" });
    area.value = text;
    document.body.append(area);
    area.select();
    try {
      return document.execCommand("copy");
    } catch {
      return false;
    } finally {
      area.remove();
      if (previous instanceof HTMLElement) previous.focus();
    }
  }
}
