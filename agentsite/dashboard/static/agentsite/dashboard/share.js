// The share dialog, one for every shareable resource (knowledge collections, workflows, MCP servers, agents):
// its access rule (GET/PUT <path>/access: {visibility, grants: [{group | user, role}]}, docs/api.md, Groups and
// access rules) and handing it over (POST <path>/transfer {user}). Pages open it through
// ctx.share({kind, path, label, transfer, onChange}) (app.js):
// - kind: the resource's kind as GET /api/meta's `access.kinds` names it ("collection", "workflow",
//   "mcp_server"): the roles a grant of it may give come from there (an MCP server takes viewer only), as do
//   the visibilities; nothing here holds a copy of either list;
// - path: the resource's API path ("/api/kb/collections/3"); label: what the title names ("notes");
// - transfer: offer "Transfer ownership" (default true: the pages open the dialog for owners and admins);
// - onChange(answer): after a save (the new rule) or a transfer ({owner}).
// A 400 naming a grant (`grants.2.group`) is shown on that grant's row; any other problem above Save.
import { api, findUser } from "./api.js";
import { confirmDialog, errorBox, errorText, field, fieldErrors, h, hint, loading, put } from "./ui.js";

// What each visibility and role means to a reader; the lists themselves are the server's (GET /api/meta).
const VISIBILITY_TEXT = {
  private: ["Private", "The owner and administrators only."],
  everyone: ["Everyone", "Every signed-in user may use it; editor grants let some change it too."],
  shared: ["Shared", "The groups and people granted below, and no one else."],
};
const ROLE_LABELS = { viewer: "Viewer", editor: "Editor" };

let dialogs = 0;

export function openShareDialog({ kind, path, label, transfer = true, user, toast, meta, onChange }) {
  const dialog = new ShareDialog({ kind, path, label, transfer, user, toast, meta, onChange: onChange || (() => {}) });
  dialog.open();
  return dialog;
}

class ShareDialog {
  constructor(options) {
    Object.assign(this, options);
    this.number = ++dialogs;
    this.visibility = null;
    this.visibilities = [];
    this.roles = [];
    this.grants = [];
    this.groups = [];
  }

  open() {
    this.previous = document.activeElement;
    const title = h("h2", { id: `share-title-${this.number}` }, `Share ${this.label}`);
    this.body = h("div", { class: "share-body" }, loading("Loading who has access…"));
    this.element = h("dialog", { class: "share-dialog", "aria-labelledby": title.id }, title, this.body,
      h("div", { class: "actions share-footer" }, h("button", { type: "button", onclick: () => this.close() }, "Close")));
    this.element.addEventListener("cancel", (event) => {
      event.preventDefault();
      this.close();
    });
    document.body.append(this.element);
    this.element.showModal();
    this.load();
  }

  close() {
    if (!this.element.isConnected) return;
    this.element.close();
    this.element.remove();
    if (this.previous instanceof HTMLElement && this.previous.isConnected) this.previous.focus();
  }

  async load() {
    let rule;
    let access;
    try {
      // Groups to grant to: every group for an admin, the caller's own for anyone else.
      [rule, this.groups, { access }] = await Promise.all([api(`${this.path}/access`),
        api("/api/groups").catch(() => []), this.meta()]);
    } catch (error) {
      put(this.body, errorBox(`Who has access could not be loaded: ${errorText(error)}`, () => this.load()));
      return;
    }
    this.visibilities = access?.visibilities || [rule.visibility];
    this.roles = access?.kinds?.[this.kind]?.roles || [];
    if (!this.roles.length) {
      put(this.body, errorBox(`This server does not share a ${this.kind} (GET /api/meta names no such kind).`));
      return;
    }
    this.visibility = rule.visibility;
    this.grants = rule.grants.map((grant) => ({ ...grant }));
    this.render();
  }

  render() {
    this.list = h("ul", { class: "share-grants", "aria-label": "Grants" });
    this.problem = h("div", { class: "form-error", role: "alert" });
    this.saveButton = h("button", { type: "button", class: "primary", onclick: () => this.save() }, "Save");
    put(this.body, this.visibilityField(),
      h("h3", {}, "Groups and people"), this.list, this.addForm(),
      this.problem, h("div", { class: "actions" }, this.saveButton),
      this.transfer ? this.transferForm() : null);
    this.renderGrants();
    this.body.querySelector("input:checked")?.focus();
  }

  visibilityField() {
    const name = `share-visibility-${this.number}`;
    return h("fieldset", { class: "share-visibility" }, h("legend", {}, "Who may use it"),
      this.visibilities.map((value) => {
        const [label, help] = VISIBILITY_TEXT[value] || [value, ""];
        const input = h("input", { type: "radio", name, value, checked: value === this.visibility,
          id: `${name}-${value}`, onchange: () => { this.visibility = value; } });
        return h("div", { class: "field check" }, input,
          h("label", { for: input.id }, label, " ", h("span", { class: "muted" }, help)));
      }));
  }

  roleSelect(role, labelText) {
    const roles = this.roles.includes(role) || !role ? this.roles : [...this.roles, role];
    return h("select", { "aria-label": labelText || null },
      roles.map((value) => h("option", { value, selected: value === role }, ROLE_LABELS[value] || value)));
  }

  renderGrants(problems = {}) {
    if (!this.grants.length) {
      put(this.list, h("li", { class: "empty" }, "No grants yet."));
      return;
    }
    put(this.list, this.grants.map((grant, index) => {
      const who = grant.group !== undefined ? "group" : "user";
      const name = grant.name || `${who} #${grant[who]}`;
      const role = this.roleSelect(grant.role, `Role of ${name}`);
      role.addEventListener("change", () => { grant.role = role.value; });
      const messages = Object.entries(problems)
        .filter(([key]) => key.startsWith(`grants.${index}.`) || key === `grants.${index}`)
        .flatMap(([, texts]) => texts);
      return h("li", { class: ["share-grant", messages.length && "invalid"], dataset: { grant: `${who}:${grant[who]}` } },
        h("span", { class: "badge" }, who), h("span", { class: "share-name", title: name }, name), role,
        h("button", { type: "button", class: "small danger", "aria-label": `Remove ${name}`,
          onclick: () => { this.grants.splice(index, 1); this.renderGrants(); } }, "Remove"),
        messages.length ? h("p", { class: "share-grant-error", role: "alert" }, messages.join(" ")) : null);
    }));
  }

  addForm() {
    const kind = h("select", {}, h("option", { value: "group" }, "A group"), h("option", { value: "user" }, "A user"));
    const group = h("select", {}, this.groups.map((item) => h("option", { value: String(item.id) }, item.name)));
    const person = h("input", { autocomplete: "off", spellcheck: "false",
      placeholder: this.user?.is_admin ? "username or id" : "user id" });
    const role = this.roleSelect(this.roles[0], null);
    const problem = h("div", { class: "form-error", role: "alert" });
    const groupField = field("Group", group);
    const userField = field("User", person);
    const show = () => {
      groupField.hidden = kind.value !== "group";
      userField.hidden = kind.value !== "user";
    };
    kind.addEventListener("change", show);
    show();
    const add = async (event) => {
      event.preventDefault();
      problem.textContent = "";
      let grant;
      if (kind.value === "group") {
        const chosen = this.groups.find((item) => String(item.id) === group.value);
        if (!chosen) {
          problem.textContent = "Choose a group.";
          return;
        }
        grant = { group: chosen.id, name: chosen.name, role: role.value };
      } else {
        try {
          const found = await findUser(person.value, { admin: Boolean(this.user?.is_admin) });
          grant = { user: found.id, name: found.username || `user #${found.id}`, role: role.value };
        } catch (error) {
          problem.textContent = errorText(error);
          person.focus();
          return;
        }
        person.value = "";
      }
      this.grants.push(grant);
      this.renderGrants();
    };
    return h("form", { class: "share-add", "aria-label": "Add a grant", novalidate: true, onsubmit: add },
      h("h4", {}, "Add a group or a person"),
      this.groups.length ? null : h("p", { class: "hint" }, "You belong to no group: grant to users by id."),
      h("div", { class: "share-add-row" }, field("Grant to", kind), groupField, userField, field("As", role),
        h("button", { type: "submit" }, "Add grant")),
      problem);
  }

  async save() {
    this.problem.textContent = "";
    this.saveButton.disabled = true;
    const grants = this.grants.map((grant) => (grant.group !== undefined
      ? { group: grant.group, role: grant.role } : { user: grant.user, role: grant.role }));
    try {
      const rule = await api(`${this.path}/access`, { method: "PUT", body: { visibility: this.visibility, grants } });
      this.toast?.(`Sharing of ${this.label} saved.`, "success");
      this.onChange(rule);
      this.close();
    } catch (error) {
      const problems = fieldErrors(error);
      const onGrants = Object.keys(problems).some((key) => /^grants\.\d+/.test(key));
      this.renderGrants(problems);
      const others = Object.entries(problems).filter(([key]) => !/^grants\.\d+/.test(key));
      this.problem.textContent = onGrants && !others.length
        ? "Fix the grants marked below their names." : errorText(error);
      this.list.querySelector(".invalid select")?.focus();
    } finally {
      this.saveButton.disabled = false;
    }
  }

  transferForm() {
    const person = h("input", { autocomplete: "off", spellcheck: "false",
      placeholder: this.user?.is_admin ? "username or id" : "user id" });
    const problem = h("div", { class: "form-error", role: "alert" });
    const submit = async (event) => {
      event.preventDefault();
      problem.textContent = "";
      let found;
      try {
        found = await findUser(person.value, { admin: Boolean(this.user?.is_admin) });
      } catch (error) {
        problem.textContent = errorText(error);
        return;
      }
      const who = found.username || `user #${found.id}`;
      if (!(await confirmDialog(`Hand ${this.label} over to ${who}? You may lose access to it.`,
        { confirmLabel: "Transfer" }))) return;
      try {
        const answer = await api(`${this.path}/transfer`, { method: "POST", body: { user: found.id } });
        this.toast?.(`${this.label} now belongs to ${answer.owner.username}.`, "success");
        this.onChange(answer);
        this.close();
      } catch (error) {
        problem.textContent = errorText(error);
      }
    };
    return h("details", { class: "share-transfer" }, h("summary", {}, "Transfer ownership"),
      h("form", { novalidate: true, onsubmit: submit },
        field("New owner", person, hint(this.user?.is_admin ? "A username or a user id." : "A user id.")),
        problem, h("button", { type: "submit", class: "danger" }, "Transfer ownership")));
  }
}
