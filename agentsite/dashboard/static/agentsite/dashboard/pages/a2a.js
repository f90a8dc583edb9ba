// Remote agents (admins): agents elsewhere that speak A2A, registered by their URL (docs/api.md, Remote A2A
// agents), each the tool a2a_<name> for those its access rule lets in. The list shows what each one's card says
// (description, version, streaming, skills), its URL, who may use it and the names of its headers (their values
// are write-only: never shown again); Refresh reads the card again, Share opens the shell's share dialog (viewer
// grants only), Delete asks first. The form registers one; a refusal is shown beside the field it names.
import {
  confirmDialog, errorBox, errorText, field, fieldErrors, h, hint, loading, pageHeader, put, usedBy,
} from "../ui.js";

// The form's words for the access rule's visibilities (the list itself is GET /api/meta's).
const VISIBILITY_LABELS = { private: "Admins only", everyone: "Every user", shared: "Admins and those it is shared with" };
const MAX_HEADER_ROWS = 20;

export async function mount(root, ctx) {
  const page = new RemoteAgentsPage(root, ctx);
  await page.start();
  return () => { page.stopped = true; };
}

class RemoteAgentsPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.stopped = false;
    this.rows = 0;
  }

  async start() {
    this.visibilities = (await this.ctx.meta()).access.visibilities;
    this.listBox = h("section", { class: "a2a-remotes", "aria-labelledby": "a2a-remotes-title" });
    put(this.root,
      pageHeader("Remote agents", "Agents elsewhere that speak A2A (Agent2Agent): each is offered to agents, chats "
        + "and workflows as the tool a2a_<name>, to the people it is shared with."),
      h("div", { class: "a2a-layout" }, this.listBox, h("div", { class: "a2a-aside" }, this.registerForm())));
    await this.load();
  }

  // --- the list --------------------------------------------------------------------------------------

  async load() {
    const title = h("h2", { id: "a2a-remotes-title" }, "Registered agents");
    put(this.listBox, title, loading("Loading remote agents…"));
    let remotes;
    try {
      remotes = (await this.ctx.api("/api/a2a/remotes")).remotes;
    } catch (error) {
      if (!this.stopped) put(this.listBox, title, errorBox(`The remote agents could not be loaded: ${errorText(error)}`, () => this.load()));
      return;
    }
    if (this.stopped) return;
    put(this.listBox, title, remotes.length
      ? h("ul", { class: "a2a-remote-list" }, remotes.map((remote) => this.item(remote)))
      : h("p", { class: "empty" }, "No remote agent is registered."));
  }

  item(remote) {
    const refresh = h("button", { type: "button", "aria-label": `Refresh ${remote.name}`,
      onclick: () => this.refresh(remote, refresh) }, "Refresh");
    return h("li", { class: "card a2a-remote", dataset: { remote: remote.name } },
      h("div", { class: "a2a-remote-head" },
        h("h3", { class: "a2a-remote-name" }, remote.name),
        h("code", { class: "a2a-remote-tool", title: "The tool's name" }, remote.tool),
        remote.version ? h("span", { class: "badge" }, `v${remote.version}`) : null,
        h("span", { class: ["badge", remote.streaming && "ok"] }, remote.streaming ? "streams" : "no streaming")),
      remote.description ? h("p", { class: "a2a-remote-description" }, remote.description) : null,
      h("p", { class: "a2a-remote-url" }, h("code", {}, remote.url)),
      h("h4", {}, "Skills"),
      remote.skills.length ? h("ul", { class: "a2a-skills" }, remote.skills.map((skill) => h("li", { dataset: { skill: skill.id } },
        h("strong", {}, skill.name || skill.id), skill.description ? ` — ${skill.description}` : null,
        skill.tags?.length ? h("span", { class: "a2a-skill-tags" }, skill.tags.map((tag) => h("span", { class: "badge" }, tag)))
          : null)))
        : h("p", { class: "muted" }, "Its card lists no skills."),
      h("p", { class: "hint a2a-used-by" }, `Used by: ${usedBy(remote)}`),
      remote.header_names?.length ? h("p", { class: "hint a2a-header-names" },
        `Headers: ${remote.header_names.join(", ")} (values kept secret)`) : null,
      h("div", { class: "actions" },
        // Who may call it: the shell's share dialog (viewer grants only, GET /api/meta says); it belongs to the
        // deployment, so there is no transfer.
        h("button", { type: "button", "aria-label": `Share ${remote.name}`, onclick: () => this.ctx.share({
          kind: "a2a_remote", path: `/api/a2a/remotes/${remote.id}`, label: remote.name, transfer: false,
          onChange: () => this.load() }) }, "Share"),
        refresh,
        h("button", { type: "button", class: "danger", "aria-label": `Delete ${remote.name}`,
          onclick: () => this.remove(remote) }, "Delete")));
  }

  async refresh(remote, button) {
    button.disabled = true;
    try {
      const fresh = await this.ctx.api(`/api/a2a/remotes/${remote.id}/refresh`, { method: "POST" });
      this.ctx.toast(`Read the card of ${fresh.name} again.`, "success");
      await this.load();
    } catch (error) {
      button.disabled = false;
      this.ctx.toast(`Could not refresh ${remote.name}: ${errorText(error)}`, "error");
    }
  }

  async remove(remote) {
    if (!(await confirmDialog(`Delete the remote agent ${remote.name}? Its tool ${remote.tool} stops being offered.`,
      { confirmLabel: "Delete" }))) return;
    try {
      await this.ctx.api(`/api/a2a/remotes/${remote.id}`, { method: "DELETE" });
      this.ctx.toast(`Deleted ${remote.name}.`, "success");
      await this.load();
    } catch (error) {
      this.ctx.toast(`Could not delete ${remote.name}: ${errorText(error)}`, "error");
    }
  }

  // --- the register form -----------------------------------------------------------------------------

  registerForm() {
    this.slots = {};
    this.problem = h("div", { class: "form-error", role: "alert" });
    this.headerList = h("div", { class: "a2a-header-rows" });
    this.headersError = this.errorSlot("headers");
    const addHeader = h("button", { type: "button", class: "small", onclick: () => {
      if (this.headerList.children.length >= MAX_HEADER_ROWS) return;
      this.headerRow().querySelector("input")?.focus();
    } }, "Add a header");
    const button = h("button", { type: "submit", class: "primary" }, "Register");
    const form = h("form", { class: "card a2a-register", "aria-labelledby": "a2a-register-title", novalidate: true,
      onsubmit: async (event) => {
        event.preventDefault();
        button.disabled = true;
        button.textContent = "Reading its card…";
        try {
          await this.register(form);
        } finally {
          button.disabled = false;
          button.textContent = "Register";
        }
      } },
    h("h2", { id: "a2a-register-title" }, "Register an agent"),
    this.withSlot("name", field("Name", h("input", { name: "name", required: true, maxlength: "48", autocomplete: "off",
      spellcheck: "false", autocapitalize: "none" }), hint("1-48 letters, digits, - or _: the tool is a2a_<name>."))),
    this.withSlot("url", field("URL", h("input", { name: "url", type: "url", required: true, autocomplete: "off",
      spellcheck: "false", placeholder: "https://agents.example.com/a2a/helper" }),
    hint("The agent's base URL (its card is read from /.well-known/agent-card.json below it) or its card's own "
      + "URL (ending in .json)."))),
    h("fieldset", { class: "a2a-headers" }, h("legend", {}, "Headers"),
      hint("Sent with every request to it, its card's included: an API key or a token. The values are kept secret: "
        + "after saving only the names show."),
      this.headerList, this.headersError, addHeader),
    this.withSlot("access.visibility", field("Who may use it", h("select", { name: "visibility" },
      this.visibilities.map((value) => h("option", { value }, VISIBILITY_LABELS[value] || value))),
    hint("With Shared: grant groups and people with Share, once it is registered."))),
    this.problem,
    h("div", { class: "actions" }, button));
    this.form = form;
    return form;
  }

  // A place for the API's messages about `name`, after the field's box and linked to its control.
  errorSlot(name) {
    const slot = h("p", { class: "a2a-field-error", role: "alert", id: `a2a-error-${name.replace(/\W/g, "-")}`, hidden: true });
    this.slots[name] = slot;
    return slot;
  }

  withSlot(name, box) {
    const slot = this.errorSlot(name);
    const control = box.querySelector("input, select, textarea");
    control.setAttribute("aria-describedby", [control.getAttribute("aria-describedby"), slot.id].filter(Boolean).join(" "));
    box.append(slot);
    return box;
  }

  headerRow() {
    const number = ++this.rows;
    const name = h("input", { class: "a2a-header-name", autocomplete: "off", spellcheck: "false", maxlength: "100",
      "aria-label": `Header ${number} name`, placeholder: "Authorization" });
    const value = h("input", { class: "a2a-header-value", type: "password", autocomplete: "off", spellcheck: "false",
      "aria-label": `Header ${number} value`, placeholder: "Bearer …" });
    const error = h("p", { class: "a2a-field-error", role: "alert", id: `a2a-header-${number}-error`, hidden: true });
    name.setAttribute("aria-describedby", error.id);
    const row = h("div", { class: "a2a-header-row" }, name, value,
      h("button", { type: "button", class: "small danger", "aria-label": `Remove header ${number}`,
        onclick: () => row.remove() }, "Remove"), error);
    this.headerList.append(row);
    return row;
  }

  // The body from the form; a header row with a value but no name is a problem on that row.
  body(form) {
    const headers = {};
    let incomplete = null;
    for (const row of this.headerList.children) {
      const name = row.querySelector(".a2a-header-name");
      const value = row.querySelector(".a2a-header-value");
      if (!name.value.trim() && !value.value) continue;
      if (!name.value.trim()) incomplete ??= row;
      headers[name.value.trim()] = value.value;
    }
    return { incomplete, body: { name: form.elements.name.value.trim(), url: form.elements.url.value.trim(),
      ...(Object.keys(headers).length ? { headers } : {}), access: { visibility: form.elements.visibility.value } } };
  }

  async register(form) {
    this.showProblems({});
    const { incomplete, body } = this.body(form);
    if (incomplete) {
      this.rowProblem(incomplete, ["Give the header's name."]);
      this.problem.textContent = "Fix the header marked.";
      return;
    }
    try {
      const remote = await this.ctx.api("/api/a2a/remotes", { method: "POST", body });
      this.ctx.toast(`Registered ${remote.name}: the tool ${remote.tool}.`, "success");
      form.reset();
      this.headerList.replaceChildren();
      await this.load();
    } catch (error) {
      this.showProblems(fieldErrors(error), error);
    }
  }

  // The API's problems, each beside the field it names (a header's on its row); what names none above Register.
  showProblems(problems, error = null) {
    for (const slot of Object.values(this.slots)) {
      slot.hidden = true;
      slot.textContent = "";
    }
    for (const control of this.form.querySelectorAll("[aria-invalid]")) control.removeAttribute("aria-invalid");
    for (const row of this.headerList.children) this.rowProblem(row, []);
    const rest = [];
    for (const [key, messages] of Object.entries(problems)) {
      const row = key.startsWith("headers.") ? this.rowNamed(key.slice("headers.".length)) : null;
      if (row) this.rowProblem(row, messages);
      else if (this.slots[key]) this.fieldProblem(key, messages);
      else rest.push(`${key}: ${messages.join(" ")}`);
    }
    const named = Object.keys(problems).length - rest.length;
    if (!error) this.problem.textContent = "";
    else if (!named) this.problem.textContent = errorText(error);
    else this.problem.textContent = rest.length ? rest.join(" ") : "Not registered: see the fields marked.";
    this.form.querySelector('[aria-invalid="true"]')?.focus();
  }

  fieldProblem(name, messages) {
    const slot = this.slots[name];
    slot.textContent = messages.join(" ");
    slot.hidden = false;
    const control = name === "headers" ? this.headerList.querySelector("input") : this.form.querySelector(`[aria-describedby~="${slot.id}"]`);
    control?.setAttribute("aria-invalid", "true");
  }

  rowNamed(name) {
    return [...this.headerList.children].find((row) => row.querySelector(".a2a-header-name").value.trim() === name);
  }

  rowProblem(row, messages) {
    const error = row.querySelector(".a2a-field-error");
    error.textContent = messages.join(" ");
    error.hidden = !messages.length;
    const name = row.querySelector(".a2a-header-name");
    if (messages.length) name.setAttribute("aria-invalid", "true");
    else name.removeAttribute("aria-invalid");
  }
}
