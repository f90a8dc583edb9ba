// Math in a message's Markdown, found before marked runs and set aside as markers (so that Markdown never reads
// a formula's underscores, asterisks or backslashes), then put back as typeset nodes. The rule (docs/dashboard.md):
// `$$…$$` and `\[…\]` are display math, `$…$` and `\(…\)` inline math, none of them across a blank line;
// an inline `$` opens only before a non-space, and the next unescaped `$` closes it only after a non-space
// and before a non-digit (Pandoc's rule), so "costs $5 and $10" stays text; `\$` is a dollar sign; nothing in
// a code span or a fenced code block is math, and no formula holds a backtick (a code span cannot close one).
const OPEN = "\uE000";
const CLOSE = "\uE001";
const MARKERS = /[\uE000\uE001]/g;
const MARKER = /\uE000(\d+)\uE001/g;
const FENCE = /^[ \t]*(?:>[ \t]?)*[ \t]*(`{3,}|~{3,})(.*)$/;
const BLANK_LINE = /\n[ \t]*\n/;
const BACKTICKS = /`+/y;

// {text, maths}: the source with each formula replaced by a marker, and the formulas ({tex, display, raw}).
export function protectMath(source) {
  const maths = [];
  let text = "";
  for (const segment of segments(String(source ?? "").replace(MARKERS, "\uFFFD"))) {
    text += segment.code ? segment.text : protectProse(segment.text, maths);
  }
  return { text, maths };
}

// The source cut into fenced code blocks ({code: true}) and what lies between them.
function segments(source) {
  const parts = [];
  let prose = "";
  let fence = null;
  let code = "";
  for (const line of source.split(/(?<=\n)/)) {
    const match = FENCE.exec(line.replace(/\n$/, ""));
    if (fence) {
      code += line;
      if (match && match[1][0] === fence[0] && match[1].length >= fence.length && !match[2].trim()) {
        parts.push({ code: true, text: code });
        fence = null;
      }
    } else if (match && !(match[1][0] === "`" && match[2].includes("`"))) {
      parts.push({ code: false, text: prose });
      prose = "";
      fence = match[1];
      code = line;
    } else {
      prose += line;
    }
  }
  parts.push(fence ? { code: true, text: code } : { code: false, text: prose });
  return parts;
}

function protectProse(text, maths) {
  let out = "";
  let i = 0;
  while (i < text.length) {
    const found = formulaAt(text, i);
    if (found) {
      out += `${OPEN}${maths.length}${CLOSE}`;
      maths.push({ tex: found.tex, display: found.display, raw: text.slice(i, found.end) });
      i = found.end;
    } else {
      const skip = skipAt(text, i);
      out += text.slice(i, skip);
      i = skip;
    }
  }
  return out;
}

// Where the text that is not a formula, starting at i, ends: past a code span, an escape, a `$$` that closes
// nothing (its second `$` opens no inline formula), or one character.
function skipAt(text, i) {
  if (text[i] === "\\" || text.startsWith("$$", i)) return Math.min(i + 2, text.length);
  if (text[i] !== "`") return i + 1;
  BACKTICKS.lastIndex = i;
  const run = BACKTICKS.exec(text)[0];
  const close = new RegExp(`(?<!\`)${run}(?!\`)`, "g");
  close.lastIndex = i + run.length;
  const match = close.exec(text);
  if (!match || BLANK_LINE.test(text.slice(i, match.index))) return i + run.length;
  return match.index + run.length;
}

// The formula that starts at i ({tex, display, end}), or null.
function formulaAt(text, i) {
  const two = text.slice(i, i + 2);
  if (two === "\\(" || two === "\\[") return delimited(text, i, two === "\\(" ? "\\)" : "\\]", two === "\\[");
  if (two === "$$") return delimited(text, i, "$$", true);
  if (text[i] === "$") return inlineDollar(text, i);
  return null;
}

function delimited(text, i, closer, display) {
  const end = text.indexOf(closer, i + 2);
  if (end < 0) return null;
  const tex = text.slice(i + 2, end);
  if (!tex.trim() || tex.includes("`") || BLANK_LINE.test(tex)) return null;
  return { tex, display, end: end + closer.length };
}

function inlineDollar(text, i) {
  if (!/\S/.test(text[i + 1] ?? " ")) return null;
  let j = i + 1;
  while (j < text.length && text[j] !== "$" && text[j] !== "`") j += text[j] === "\\" ? 2 : 1;
  if (j >= text.length || text[j] === "`" || /\s/.test(text[j - 1]) || /\d/.test(text[j + 1] ?? "")) return null;
  const tex = text.slice(i + 1, j);
  if (BLANK_LINE.test(tex)) return null;
  return { tex, display: false, end: j + 1 };
}

// The markers in a fragment rendered from protectMath's text, replaced: by node(math) in text, by the formula's
// source inside code (an indented code block the scan did not see) and in attributes (an image's alt).
export function restoreMath(fragment, maths, node) {
  const walker = document.createTreeWalker(fragment, NodeFilter.SHOW_TEXT);
  const found = [];
  while (walker.nextNode()) if (walker.currentNode.data.includes(OPEN)) found.push(walker.currentNode);
  for (const text of found) {
    const inCode = text.parentElement?.closest("code, pre");
    const parts = [];
    let last = 0;
    for (const match of text.data.matchAll(MARKER)) {
      const math = maths[Number(match[1])];
      parts.push(text.data.slice(last, match.index), math ? (inCode ? math.raw : node(math)) : match[0]);
      last = match.index + match[0].length;
    }
    parts.push(text.data.slice(last));
    text.replaceWith(...parts.filter((part) => part !== ""));
  }
  for (const element of fragment.querySelectorAll("*")) {
    for (const attribute of element.attributes) {
      if (attribute.value.includes(OPEN)) {
        attribute.value = attribute.value.replace(MARKER, (all, index) => maths[Number(index)]?.raw ?? all);
      }
    }
  }
}
