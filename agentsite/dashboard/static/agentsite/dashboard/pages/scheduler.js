// Scheduler: the user's cron tasks (next run, time zone), a form whose cron field previews the next five
// fire times as you type, enable/disable, run now, delete, edit, and each task's run history (skipped runs
// with their reasons). History refreshes itself while a run is queued or running.
import {
  checkbox, confirmDialog, errorBox, errorText, field, fieldErrors, formatTime, h, hint, loading, localZone, pageHeader,
  put, timeZones,
} from "../ui.js";

const PREVIEW_DELAY_MS = 300;
const DEFAULT_CRON = "0 9 * * 1-5";
const POLL_MS = 1500;
const MISSED = [["run_once", "Run once to catch up"], ["skip", "Skip (record a skipped run)"]];

export async function mount(root, ctx) {
  const page = new SchedulerPage(root, ctx);
  await page.start();
  return () => page.stop();
}

class SchedulerPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.tasks = [];
    this.workflows = [];
    this.sessions = [];
    this.openHistory = new Set();
    this.histories = new Map();
    this.timers = new Set();
    this.aborts = new Set();
    this.stopped = false;
    this.editing = null;
  }

  stop() {
    this.stopped = true;
    for (const timer of this.timers) clearTimeout(timer);
    for (const controller of this.aborts) controller.abort();
  }

  later(fn, ms) {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (!this.stopped) fn();
    }, ms);
    this.timers.add(timer);
    return timer;
  }

  async start() {
    this.listBox = h("section", { class: "sched-tasks", "aria-labelledby": "sched-tasks-title" });
    this.form = this.buildForm();
    put(this.root, 
      pageHeader("Scheduler", "Prompts or workflows that run on a cron schedule, in a time zone of your choice."),
      h("div", { class: "sched-layout" }, this.form, this.listBox));
    put(this.listBox, h("h2", { id: "sched-tasks-title" }, "Tasks"), loading("Loading tasks…"));
    await Promise.all([this.loadTasks(), this.loadChoices()]);
    if (this.tasks.length) this.renderTasks(); // again, now naming the tasks' workflows and sessions
    this.schedulePreview();
  }

  // The workflows a task may run and the chat sessions it may write to (the user's own).
  async loadChoices() {
    const [workflows, sessions, models] = await Promise.all([
      this.ctx.api("/api/workflows?limit=200").then((data) => data.results, () => []),
      this.ctx.api("/api/sessions?limit=200").then((data) => data.results, () => []),
      this.ctx.api("/api/models").then((data) => data.models.filter((entry) => entry.state !== "discovery_failed"), () => []),
    ]);
    this.workflows = workflows;
    this.sessions = sessions;
    const fill = (select, empty, items, label) => {
      const current = select.value;
      put(select, h("option", { value: "" }, empty), ...items.map((item) => h("option", { value: item.id }, label(item))));
      select.value = current;
    };
    fill(this.form.elements.workflow_id, "None: send the prompt to the agent", workflows, (item) => `Workflow ${item.name}`);
    fill(this.form.elements.session_id, "None", sessions, (item) => item.name);
    const model = this.form.elements.model;
    const chosen = model.value;
    fill(model, "Default (the chat's, else the agent's)", models.map((entry) => ({ id: entry.name, ...entry })), (item) => item.name);
    this.modelChoice(chosen);
  }

  // Select a task's model, keeping one the catalogue no longer lists as a choice.
  modelChoice(name) {
    const model = this.form.elements.model;
    if (name && ![...model.options].some((option) => option.value === name)) model.append(h("option", { value: name }, `${name} (not available)`));
    model.value = name || "";
  }

  async loadTasks() {
    try {
      const data = await this.ctx.api("/api/scheduler/tasks?limit=200");
      this.tasks = data.results;
      this.renderTasks();
    } catch (error) {
      if (this.stopped) return;
      put(this.listBox, h("h2", { id: "sched-tasks-title" }, "Tasks"),
        errorBox(`The tasks could not be loaded: ${errorText(error)}`, () => this.loadTasks()));
    }
  }

  // --- the form --------------------------------------------------------------------------------------

  buildForm() {
    const zones = h("datalist", { id: "sched-zones" }, ...timeZones().map((zone) => h("option", { value: zone })));
    this.previewList = h("ol", { class: "sched-preview-times" });
    this.previewStatus = h("p", { class: "sched-preview-status", id: "sched-preview-status" });
    this.formError = h("div", { class: "form-error", role: "alert", hidden: true });
    this.formTitle = h("h2", { id: "sched-form-title" }, "New task");
    this.submitButton = h("button", { type: "submit", class: "primary" }, "Create task");
    this.cancelEdit = h("button", { type: "button", hidden: true, onclick: () => this.resetForm() }, "Cancel editing");
    const form = h("form", { class: "sched-form card", "aria-labelledby": "sched-form-title", novalidate: true,
      onsubmit: (event) => { event.preventDefault(); this.submit(); } },
    this.formTitle,
    field("Name", h("input", { name: "name", required: true, maxlength: "200", autocomplete: "off" })),
    field("Prompt", h("textarea", { name: "prompt", rows: "3", required: true })),
    field("Cron", h("input", { name: "cron", value: DEFAULT_CRON, required: true, autocomplete: "off",
      spellcheck: "false", "aria-describedby": "sched-preview-status", oninput: () => this.schedulePreview() }),
    hint("Five fields: minute, hour, day of month, month, day of week (e.g. */15 * * * *).")),
    h("div", { class: "sched-preview", "aria-live": "polite" },
      h("h3", {}, "Next five runs"), this.previewStatus, this.previewList),
    field("Time zone", h("input", { name: "timezone", value: localZone(), list: "sched-zones", required: true,
      autocomplete: "off", spellcheck: "false", oninput: () => this.schedulePreview() })), zones,
    field("When runs were missed", h("select", { name: "missed" },
      ...MISSED.map(([value, label]) => h("option", { value }, label)))),
    field("Runs", h("select", { name: "workflow_id" }, h("option", { value: "" }, "None: send the prompt to the agent"))),
    field("Chat session", h("select", { name: "session_id" }, h("option", { value: "" }, "None")),
      hint("The prompt and the reply are also added to this chat.")),
    field("Model", h("select", { name: "model" }, h("option", { value: "" }, "Default (the chat's, else the agent's)")),
      hint("The model the prompt goes to. A workflow's LLM nodes name their own.")),
    checkbox("Enabled", h("input", { type: "checkbox", name: "enabled", checked: true })),
    this.formError,
    h("div", { class: "actions" }, this.submitButton, this.cancelEdit));
    return form;
  }

  schedulePreview() {
    clearTimeout(this.previewTimer);
    this.timers.delete(this.previewTimer);
    this.previewAbort?.abort(); // an answer about what was typed before must not land after this keystroke
    this.previewStatus.textContent = "Checking…";
    this.previewList.classList.add("stale"); // the times shown are of what was typed before
    this.previewTimer = this.later(() => this.preview(), PREVIEW_DELAY_MS);
  }

  async preview() {
    const cron = this.form.elements.cron.value.trim();
    const zone = this.form.elements.timezone.value.trim() || "UTC";
    this.previewAbort?.abort();
    if (!cron) {
      put(this.previewList);
      this.previewStatus.textContent = "Type a cron expression to see when it fires.";
      return;
    }
    const controller = new AbortController();
    this.previewAbort = controller;
    this.aborts.add(controller);
    const query = new URLSearchParams({ cron, timezone: zone, count: "5" });
    try {
      const data = await this.ctx.api(`/api/scheduler/preview?${query}`, { signal: controller.signal });
      this.setInvalid([]);
      this.previewList.classList.remove("stale");
      this.previewStatus.textContent = `In ${zone}:`;
      put(this.previewList, ...data.next.map((iso) => h("li", {},
        h("time", { datetime: iso, title: `${iso} (UTC)` }, formatTime(iso, zone)))));
    } catch (error) {
      if (controller.signal.aborted) return;
      const fields = fieldErrors(error);
      this.setInvalid(Object.keys(fields));
      put(this.previewList);
      put(this.previewStatus, h("span", { class: "error-text", role: "alert" }, errorText(error)));
    } finally {
      this.aborts.delete(controller);
    }
  }

  setInvalid(names) {
    for (const name of ["cron", "timezone", "name", "prompt", "missed", "workflow_id", "session_id", "model"]) {
      const input = this.form.elements[name];
      if (names.includes(name)) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    }
  }

  values() {
    const elements = this.form.elements;
    return {
      name: elements.name.value.trim(), prompt: elements.prompt.value, cron: elements.cron.value.trim(),
      timezone: elements.timezone.value.trim() || "UTC", missed: elements.missed.value,
      workflow_id: elements.workflow_id.value || null, session_id: elements.session_id.value || null,
      model: elements.workflow_id.value ? "" : elements.model.value, enabled: elements.enabled.checked,
    };
  }

  async submit() {
    this.formError.hidden = true;
    const body = this.values();
    const editing = this.editing;
    this.submitButton.disabled = true;
    try {
      const task = await this.ctx.api(editing ? `/api/scheduler/tasks/${editing}` : "/api/scheduler/tasks",
        { method: editing ? "PATCH" : "POST", body });
      this.ctx.toast(editing ? `Task ${task.name} saved.` : `Task ${task.name} created.`, "success");
      this.resetForm();
      await this.loadTasks();
    } catch (error) {
      const fields = fieldErrors(error);
      this.setInvalid(Object.keys(fields));
      put(this.formError, errorText(error));
      this.formError.hidden = false;
    } finally {
      this.submitButton.disabled = false;
    }
  }

  resetForm() {
    this.editing = null;
    this.form.reset();
    this.form.elements.cron.value = DEFAULT_CRON;
    this.form.elements.timezone.value = localZone();
    this.form.elements.enabled.checked = true;
    this.formTitle.textContent = "New task";
    this.submitButton.textContent = "Create task";
    this.cancelEdit.hidden = true;
    this.formError.hidden = true;
    this.setInvalid([]);
    this.schedulePreview();
  }

  edit(task) {
    this.editing = task.id;
    const elements = this.form.elements;
    elements.name.value = task.name;
    elements.prompt.value = task.prompt;
    elements.cron.value = task.cron;
    elements.timezone.value = task.timezone;
    elements.missed.value = task.missed;
    elements.workflow_id.value = task.workflow_id || "";
    elements.session_id.value = task.session_id || "";
    this.modelChoice(task.model);
    elements.enabled.checked = task.enabled;
    this.formTitle.textContent = `Edit task ${task.name}`;
    this.submitButton.textContent = "Save task";
    this.cancelEdit.hidden = false;
    this.schedulePreview();
    elements.name.focus();
  }

  // --- the list --------------------------------------------------------------------------------------

  renderTasks() {
    const title = h("h2", { id: "sched-tasks-title" }, "Tasks");
    if (!this.tasks.length) {
      put(this.listBox, title, h("p", { class: "empty" }, "No tasks yet. Create one with the form."));
      return;
    }
    put(this.listBox, title, h("ul", { class: "sched-task-list" }, ...this.tasks.map((task) => this.taskItem(task))));
  }

  taskItem(task) {
    const workflow = this.workflows.find((item) => item.id === task.workflow_id);
    const session = this.sessions.find((item) => item.id === task.session_id);
    const history = h("div", { class: "sched-history", id: `history-${task.id}` });
    const item = h("li", { class: `sched-task card${task.enabled ? "" : " disabled"}`, "data-task-id": task.id,
      "aria-label": `Task ${task.name}` },
    h("div", { class: "sched-task-head" },
      h("h3", {}, task.name),
      h("span", { class: `badge ${task.enabled ? "ok" : "muted"}` }, task.enabled ? "Enabled" : "Disabled")),
    h("dl", { class: "sched-facts" },
      h("dt", {}, "Cron"), h("dd", {}, h("code", {}, task.cron)),
      h("dt", {}, "Time zone"), h("dd", {}, task.timezone),
      h("dt", {}, "Next run"), h("dd", { class: "next-run" }, task.enabled && task.next_run_at
        ? h("time", { datetime: task.next_run_at, title: `${task.next_run_at} (UTC)` }, formatTime(task.next_run_at, task.timezone))
        : "Not scheduled (disabled)"),
      h("dt", {}, "Last run"), h("dd", {}, task.last_run_at
        ? h("time", { datetime: task.last_run_at }, formatTime(task.last_run_at, task.timezone)) : "Never"),
      h("dt", {}, "Runs"), h("dd", {}, workflow ? `Workflow ${workflow.name}` : task.workflow_id ? "A workflow" : "The agent"),
      task.session_id ? [h("dt", {}, "Chat"), h("dd", {}, session ? session.name : "A chat session")] : null,
      task.model ? [h("dt", {}, "Model"), h("dd", {}, task.model)] : null,
      h("dt", {}, "If missed"), h("dd", {}, task.missed === "skip" ? "Skip" : "Run once")),
    h("details", { class: "sched-prompt" }, h("summary", {}, "Prompt"), h("pre", {}, task.prompt)),
    h("div", { class: "actions" },
      h("button", { type: "button", onclick: () => this.toggle(task) }, task.enabled ? "Disable" : "Enable"),
      h("button", { type: "button", onclick: () => this.runNow(task) }, "Run now"),
      h("button", { type: "button", "aria-expanded": String(this.openHistory.has(task.id)),
        "aria-controls": history.id, onclick: (event) => this.toggleHistory(task, event.currentTarget) }, "History"),
      h("button", { type: "button", onclick: () => this.edit(task) }, "Edit"),
      h("button", { type: "button", class: "danger", onclick: () => this.remove(task) }, "Delete")),
    history);
    if (this.openHistory.has(task.id)) this.renderHistory(task, history);
    return item;
  }

  async action(work, failure) {
    try {
      await work();
    } catch (error) {
      this.ctx.toast(`${failure}: ${errorText(error)}`, "error");
    }
  }

  toggle(task) {
    return this.action(async () => {
      const updated = await this.ctx.api(`/api/scheduler/tasks/${task.id}`, { method: "PATCH", body: { enabled: !task.enabled } });
      this.ctx.toast(`Task ${updated.name} ${updated.enabled ? "enabled" : "disabled"}.`, "success");
      await this.loadTasks();
    }, `Could not change ${task.name}`);
  }

  runNow(task) {
    return this.action(async () => {
      await this.ctx.api(`/api/scheduler/run/${task.id}`, { method: "POST" });
      this.ctx.toast(`Task ${task.name} queued to run now.`, "success");
      this.openHistory.add(task.id);
      await this.loadTasks();
    }, `Could not run ${task.name}`);
  }

  async remove(task) {
    if (!(await confirmDialog(`Delete the task ${task.name} and its history?`, { confirmLabel: "Delete" }))) return;
    await this.action(async () => {
      await this.ctx.api(`/api/scheduler/tasks/${task.id}`, { method: "DELETE" });
      this.openHistory.delete(task.id);
      this.ctx.toast(`Task ${task.name} deleted.`, "success");
      if (this.editing === task.id) this.resetForm();
      await this.loadTasks();
    }, `Could not delete ${task.name}`);
  }

  toggleHistory(task, button) {
    const box = this.listBox.querySelector(`#history-${CSS.escape(task.id)}`);
    if (this.openHistory.has(task.id)) {
      this.openHistory.delete(task.id);
      button.setAttribute("aria-expanded", "false");
      put(box);
      return;
    }
    this.openHistory.add(task.id);
    button.setAttribute("aria-expanded", "true");
    this.renderHistory(task, box);
  }

  async renderHistory(task, box) {
    if (!box.childElementCount) put(box, loading("Loading history…"));
    let runs;
    try {
      runs = (await this.ctx.api(`/api/scheduler/history?task=${encodeURIComponent(task.id)}&limit=50`)).results;
    } catch (error) {
      if (!this.stopped) put(box, errorBox(`The history could not be loaded: ${errorText(error)}`, () => this.renderHistory(task, box)));
      return;
    }
    if (this.stopped || !this.openHistory.has(task.id)) return;
    put(box, h("h4", {}, `History of ${task.name}`), runs.length ? h("table", { class: "sched-runs" },
      h("thead", {}, h("tr", {}, ...["When", "Trigger", "Status", "Result"].map((label) => h("th", { scope: "col" }, label)))),
      h("tbody", {}, ...runs.map((run) => runRow(run, task.timezone)))) : h("p", { class: "empty" }, "No runs yet."));
    // A queued or running run changes soon: look again until every run has finished.
    if (runs.some((run) => run.status === "queued" || run.status === "running")) {
      this.later(() => {
        if (!this.openHistory.has(task.id)) return;
        const current = this.listBox.querySelector(`#history-${CSS.escape(task.id)}`);
        if (current) this.renderHistory(task, current);
        this.refreshTask(task.id);
      }, POLL_MS);
    }
  }

  async refreshTask(id) {
    try {
      const task = await this.ctx.api(`/api/scheduler/tasks?limit=200`);
      this.tasks = task.results;
      const item = this.listBox.querySelector(`[data-task-id="${CSS.escape(id)}"] .sched-facts`);
      const fresh = this.tasks.find((each) => each.id === id);
      if (item && fresh) item.replaceWith(this.taskItem(fresh).querySelector(".sched-facts"));
    } catch {
      // the next refresh or a reload shows it
    }
  }
}

function runRow(run, zone) {
  const result = run.status === "skipped" ? h("span", { class: "reason" }, run.error || "Skipped.")
    : run.error ? h("span", { class: "error-text" }, run.error)
      : run.output ? h("details", {}, h("summary", {}, "Output"), h("pre", {}, run.output))
        : h("span", { class: "muted" }, run.status === "queued" || run.status === "running" ? "Waiting…" : "");
  const duration = run.started_at && run.finished_at
    ? ` (${((Date.parse(run.finished_at) - Date.parse(run.started_at)) / 1000).toFixed(1)} s)` : "";
  return h("tr", { class: `run status-${run.status}`, "data-run-id": run.id },
    h("td", {}, h("time", { datetime: run.scheduled_for, title: `${run.scheduled_for} (UTC)` }, formatTime(run.scheduled_for, zone))),
    h("td", {}, run.trigger.replace("_", " ")),
    h("td", {}, h("span", { class: `badge status ${run.status}` }, run.status), duration),
    h("td", {}, result));
}
