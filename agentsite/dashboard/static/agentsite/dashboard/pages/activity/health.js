// The health strip of the Activity page: requests per second, the share of them answered 5xx, the median time
// to an upstream's first token, and the event streams open now, from GET /api/metrics/summary (docs/api.md,
// Metrics). The server answers totals since its metrics started; the strip asks every 5 s while the page is
// open and makes each figure from the last two answers. The first answer alone gives the figures since the
// start (each says so); requests/s needs the second. stop() ends the polling (the page's cleanup calls it).
import { errorText, h, put } from "../../ui.js";

const EVERY_MS = 5000;
const FIGURES = [
  ["requests", "Requests/s"],
  ["errors", "Errors (5xx)"],
  ["latency", "p50 first token"],
  ["streams", "Open streams"],
];

export function healthStrip(ctx) {
  const strip = new HealthStrip(ctx);
  strip.poll();
  return strip;
}

// The median of a cumulative histogram ([{le, count}], "+Inf" last), as the server's p50 estimates it
// (agentsite/core/metrics.py, median): linear within the bucket the middle observation falls in.
function median(buckets) {
  const total = buckets.at(-1)?.count ?? 0;
  if (total <= 0) return null;
  const rank = total / 2;
  let lower = 0;
  let below = 0;
  for (const { le, count } of buckets) {
    if (count >= rank) {
      if (le === "+Inf") return lower;
      const upper = Number(le);
      const inside = count - below;
      return lower + (upper - lower) * (inside ? (rank - below) / inside : 1);
    }
    lower = Number(le);
    below = count;
  }
  return lower;
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(2)} s`;
}

function percent(part, whole) {
  return `${((100 * part) / whole).toFixed(part && part < whole ? 1 : 0)} %`;
}

class HealthStrip {
  constructor(ctx) {
    this.ctx = ctx;
    this.previous = null;
    this.failing = false;
    this.stopped = false;
    this.timer = null;
    this.figures = {};
    const list = h("dl", { class: "health-figures" }, FIGURES.map(([name, label]) => {
      const value = h("dd", { class: "health-value" }, "…");
      const note = h("dd", { class: "hint" });
      this.figures[name] = { value, note };
      return h("div", { class: "health-figure", "data-figure": name }, h("dt", {}, label), value, note);
    }));
    this.body = h("div", { class: "health-body" }, list);
    this.element = h("section", { class: "card health-strip", "aria-labelledby": "health-title" },
      h("h2", { id: "health-title" }, "Health"), this.body);
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  async poll() {
    let answer;
    try {
      answer = await this.ctx.api("/api/metrics/summary");
    } catch (error) {
      if (this.stopped) return;
      // Said once, not every 5 s; the figures stay, marked stale, until an answer comes again.
      if (!this.failing) this.ctx.toast(`The health figures could not be read: ${errorText(error)}`, "error");
      this.failing = true;
      this.element.dataset.stale = "true";
      this.timer = setTimeout(() => this.poll(), EVERY_MS);
      return;
    }
    if (this.stopped) return;
    this.failing = false;
    delete this.element.dataset.stale;
    if (!answer.enabled) {
      // Metrics are read at start-up: nothing changes until a restart, so the strip stops asking.
      put(this.body, h("p", { class: "notice health-off", role: "note" },
        "Metrics are off. Start the server with AGENTSITE_METRICS=1 to see requests per second, errors, upstream ",
        "latency and open streams here (and at /metrics for Prometheus)."));
      return;
    }
    this.show(answer);
    this.previous = answer;
    this.timer = setTimeout(() => this.poll(), EVERY_MS);
  }

  set(name, value, note) {
    this.figures[name].value.textContent = value;
    this.figures[name].note.textContent = note;
  }

  show(now) {
    const before = this.previous;
    // A total that went down: the server restarted, and this answer starts again.
    const base = before && now.at > before.at && now.requests >= before.requests
      && now.first_token.count >= before.first_token.count ? before : null;
    const span = base ? `last ${Math.round(now.at - base.at)} s` : "since start";
    if (base) {
      const requests = now.requests - base.requests;
      const errors = now.errors - base.errors;
      this.set("requests", (requests / (now.at - base.at)).toFixed(2), span);
      this.set("errors", requests ? percent(errors, requests) : "–", requests ? `${errors} of ${requests}, ${span}` : `no request, ${span}`);
    } else {
      this.set("requests", "…", "measuring");
      this.set("errors", now.requests ? percent(now.errors, now.requests) : "–", `${now.errors} of ${now.requests}, ${span}`);
    }
    const calls = base ? now.first_token.count - base.first_token.count : 0;
    if (calls > 0) {
      const buckets = now.first_token.buckets.map((bucket, index) => ({
        le: bucket.le, count: bucket.count - (base.first_token.buckets[index]?.count ?? 0) }));
      this.set("latency", seconds(median(buckets)), `${calls} streamed call${calls === 1 ? "" : "s"}, ${span}`);
    } else {
      const total = now.first_token.count;
      this.set("latency", seconds(now.first_token.p50), total ? `${total} streamed calls, since start` : "no streamed call yet");
    }
    this.set("streams", String(now.streams_open), "now");
  }
}
