// The editor's Run panel: run the workflow with an input (streamed over SSE, each node's result as its
// events arrive), Stop, the finished run's trace, output and error, and the recent runs to look back at.
import { stream } from "../../api.js";
import { errorText, field, h, put } from "../../ui.js";
import { showValue } from "./document.js";

const STATES = { success: "done", error: "error", cancelled: "cancelled", running: "running", waiting: "waiting" };
const STATE_WORDS = { running: "running…", done: "done", error: "error", cancelled: "cancelled", waiting: "waiting for approval" };
const RUN_WORDS = { success: "The run succeeded", error: "The run failed", cancelled: "The run was cancelled",
  waiting: "The run is waiting for an approval (Workflows lists it for its approvers); it goes on once decided",
  queued: "The run is queued" };

// options: ctx (the page's), id (the workflow's), beforeRun() -> Promise of whether the workflow may run
// (the editor saves first), onResults() after `results` changed. `element` is the panel to place.
export class RunPanel {
  constructor({ ctx, id, beforeRun, onResults }) {
    Object.assign(this, { ctx, id, beforeRun, onResults });
    this.results = new Map(); // node name -> {state, status, duration_ms, output, error, attempts}
    this.abort = null; // the AbortController of the run under way
    this.stopped = false;
    this.element = this.build();
  }

  build() {
    this.input = h("textarea", { name: "runInput", rows: "3" });
    this.runButton = h("button", { type: "submit", class: "primary" }, "Run");
    this.stopButton = h("button", { type: "button", disabled: true, onclick: () => this.abort?.abort() }, "Stop");
    this.status = h("p", { class: "wf-run-status", role: "status", "aria-live": "polite" });
    this.output = h("div", { class: "wf-run-output" });
    this.trace = h("ol", { class: "wf-trace", "aria-label": "Node results" });
    this.runList = h("ul", { class: "wf-runs" });
    return h("section", { class: "card wf-run", "aria-labelledby": "wf-run-title" },
      h("h2", { id: "wf-run-title" }, "Run"),
      h("form", { novalidate: true, onsubmit: (event) => { event.preventDefault(); this.run(); } },
        field("Run input", this.input),
        h("div", { class: "actions" }, this.runButton, this.stopButton)),
      this.status, this.output, this.trace,
      h("details", { class: "wf-recent", ontoggle: (event) => event.currentTarget.open && this.loadRuns() },
        h("summary", {}, "Recent runs"), this.runList));
  }

  // The page is leaving: hang up the run under way, touch nothing more.
  stop() {
    this.stopped = true;
    this.abort?.abort();
  }

  // What the graph shows on each node: name -> {state, text}.
  nodeStates() {
    const states = new Map();
    for (const [name, result] of this.results) {
      const timing = result.duration_ms !== undefined ? ` · ${Math.round(result.duration_ms)} ms` : "";
      states.set(name, { state: result.state, text: `${STATE_WORDS[result.state] || result.state}${timing}` });
    }
    return states;
  }

  showResults() {
    put(this.trace, ...[...this.results].map(([name, result]) => h("li", { class: `wf-trace-item ${result.state}`, "data-node": name },
      h("div", { class: "wf-trace-head" }, h("strong", {}, name),
        h("span", { class: `badge status ${result.state}` }, result.state),
        result.duration_ms !== undefined ? h("span", { class: "muted" }, `${Math.round(result.duration_ms * 10) / 10} ms`) : null,
        result.attempts > 1 ? h("span", { class: "muted" }, `${result.attempts} attempts`) : null),
      result.error ? h("p", { class: "error-text" }, result.error) : null,
      result.output !== undefined ? h("pre", { class: "wf-output" }, showValue(result.output)) : null)));
    this.onResults();
  }

  async run() {
    if (this.abort) return;
    if (!(await this.beforeRun())) {
      this.status.textContent = "Not run: the workflow has unsaved problems (see above).";
      return;
    }
    this.results = new Map();
    this.showResults();
    put(this.output);
    const controller = new AbortController();
    this.abort = controller;
    this.runButton.disabled = true;
    this.stopButton.disabled = false;
    this.status.textContent = "Running…";
    try {
      this.showRun(await this.streamRun(controller));
    } catch (error) {
      if (this.stopped) return;
      if (controller.signal.aborted) {
        for (const result of this.results.values()) if (result.state === "running") result.state = "cancelled";
        this.showResults();
        this.status.textContent = "Stopped: the run was cancelled.";
      } else {
        this.status.textContent = `The run failed: ${errorText(error)}`;
        this.ctx.toast(`The run failed: ${errorText(error)}`, "error");
      }
    } finally {
      this.abort = null;
      if (!this.stopped) {
        this.runButton.disabled = false;
        this.stopButton.disabled = true;
        this.loadRuns();
      }
    }
  }

  // The run's stream, its node events shown as they come; resolves with the finished run, or throws the
  // stream's error event as an Error with its code.
  async streamRun(controller) {
    let finished = null;
    let failure = null;
    await stream(`/api/workflows/${encodeURIComponent(this.id)}/run`, {
      body: { input: this.input.value, stream: true }, signal: controller.signal,
      onEvent: ({ event, data }) => {
        if (this.stopped) return;
        if (event === "done") finished = data.run;
        // The run stopped at approval nodes: the stream ends here; the run goes on once they are decided.
        else if (event === "approval_requested") {
          finished = data.run;
          window.dispatchEvent(new CustomEvent("agentsite:approvals"));
        } else if (event === "error") failure = data;
        else this.onRunEvent(event, data);
      },
    });
    if (!finished) throw Object.assign(new Error(failure?.message || "The run ended without a result."), { code: failure?.code });
    return finished;
  }

  onRunEvent(event, data) {
    if (event === "run_started") {
      this.status.textContent = "Running…";
    } else if (event === "node_started") {
      this.results.set(data.node, { state: "running" });
      this.showResults();
    } else if (event === "delta") {
      const result = this.results.get(data.node) || { state: "running" };
      result.output = `${result.output || ""}${data.content}`;
      this.results.set(data.node, result);
      this.showResults();
    } else if (event === "node_finished") {
      this.results.set(data.node, { ...(this.results.get(data.node) || {}), state: STATES[data.status] || data.status,
        status: data.status, duration_ms: data.duration_ms, output: data.output });
      this.showResults();
    }
  }

  // A finished run (streamed or picked from the recent runs): its trace, outputs, error and output.
  showRun(run) {
    this.results = new Map();
    for (const entry of run.trace) {
      this.results.set(entry.node, { state: STATES[entry.status] || entry.status, status: entry.status,
        duration_ms: entry.duration_ms, attempts: entry.attempts, error: entry.error,
        output: entry.node in run.outputs ? run.outputs[entry.node] : undefined });
    }
    this.showResults();
    if (run.status === "waiting") {
      for (const [name, result] of this.results) if (result.status === "waiting") this.results.set(name, { ...result, state: "waiting" });
      this.showResults();
    }
    const took = run.started_at && run.finished_at ? ` in ${((Date.parse(run.finished_at) - Date.parse(run.started_at)) / 1000).toFixed(2)} s` : "";
    this.status.textContent = `${RUN_WORDS[run.status] || `Run ${run.status}`}${took}.`;
    put(this.output,
      run.error ? h("p", { class: "error-text", role: "alert" }, run.error.node ? `${run.error.node}: ${run.error.message}` : run.error.message) : null,
      run.output !== null && run.output !== undefined ? h("div", { class: "wf-final" }, h("h3", {}, "Output"),
        h("pre", { class: "wf-output wf-final-output" }, showValue(run.output))) : null);
  }

  async loadRuns() {
    let runs;
    try {
      runs = (await this.ctx.api(`/api/workflows/${encodeURIComponent(this.id)}/runs?limit=10`)).results;
    } catch {
      return;
    }
    if (this.stopped) return;
    put(this.runList, ...(runs.length ? runs.map((run) => h("li", {},
      h("button", { type: "button", class: "link", onclick: () => this.showRun(run) },
        `${new Date(run.started_at || run.finished_at || Date.now()).toLocaleString()} · ${run.status}`),
      run.input ? h("span", { class: "muted" }, ` input: ${run.input.slice(0, 40)}`) : null))
      : [h("li", { class: "muted" }, "No runs yet.")]));
  }
}
