// Groups (#/groups, #/groups/<id>): the groups listed beside the chosen one's details and members. Shown to
// admins, who create, rename, describe, limit the models of and delete every group, and to the managers of a
// group, who add, promote and remove its members (pages/groups/members.js) and see its budget, which admins
// set (pages/groups/budget.js). GET /api/groups answers every
// group to an admin and the caller's own to anyone else.
import { listAll } from "../api.js";
import { checkbox, confirmDialog, errorBox, errorText, field, formatTime, h, hint, loading, pageHeader, put } from "../ui.js";
import { BudgetSection } from "./groups/budget.js";
import { MembersSection } from "./groups/members.js";

export async function mount(root, ctx) {
  const page = new GroupsPage(root, ctx);
  await page.start();
  return () => { page.stopped = true; };
}

class GroupsPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.admin = Boolean(ctx.user?.is_admin);
    this.stopped = false;
    this.groups = [];
    this.users = null;
  }

  async start() {
    this.listBox = h("section", { class: "card groups-list", "aria-labelledby": "groups-list-title" });
    this.detail = h("section", { class: "groups-detail", "aria-label": "The chosen group" });
    const summary = this.admin ? "Groups of users: share with a group at once, limit the models its members use."
      : "The groups you manage: add and remove their members.";
    put(this.root, pageHeader("Groups", summary),
      h("div", { class: "groups-layout" },
        h("div", { class: "groups-side" }, this.listBox, this.admin ? this.createForm() : null),
        this.detail));
    if (this.admin) this.loadUsers();
    this.memberRoles = (await this.ctx.meta()).access.member_roles;
    await this.load();
  }

  // Admins pick members by name: every user's name, suggested as they type (GET /api/users is admins' only).
  async loadUsers() {
    try {
      this.users = await listAll("/api/users?limit=200", { max: 5000 });
    } catch {
      this.users = null; // a name is still looked up when the form is sent
    }
    this.members?.suggest(this.users);
  }

  manages(group) {
    return this.admin || (this.ctx.user?.groups || [])
      .some((item) => String(item.id) === String(group.id) && item.role === "manager");
  }

  async load() {
    put(this.listBox, h("h2", { id: "groups-list-title" }, "Groups"), loading("Loading groups…"));
    try {
      this.groups = await this.ctx.api("/api/groups");
    } catch (error) {
      if (!this.stopped) {
        put(this.listBox, h("h2", { id: "groups-list-title" }, "Groups"),
          errorBox(`The groups could not be loaded: ${errorText(error)}`, () => this.load()));
      }
      return;
    }
    if (this.stopped) return;
    const [wanted] = this.ctx.route || [];
    const chosen = this.groups.find((group) => String(group.id) === wanted) || this.groups[0] || null;
    put(this.listBox, h("h2", { id: "groups-list-title" }, "Groups"),
      this.groups.length ? h("ul", { class: "groups-items" }, this.groups.map((group) => h("li", {
        dataset: { groupId: String(group.id) } },
      h("a", { href: `#/groups/${group.id}`, "aria-current": group === chosen ? "page" : null, title: group.name }, group.name),
      h("span", { class: "muted" }, ` ${group.members_count} member${group.members_count === 1 ? "" : "s"}`),
      this.manages(group) && !this.admin ? h("span", { class: "badge" }, "manager") : null)))
        : h("p", { class: "empty" }, this.admin ? "No groups yet: create one." : "You belong to no group."));
    this.show(chosen);
  }

  show(group) {
    if (!group) {
      put(this.detail);
      return;
    }
    this.members = new MembersSection({ ctx: this.ctx, group, roles: this.memberRoles, manages: this.manages(group),
      admin: this.admin, users: this.users, onChange: () => this.load() });
    this.budget = new BudgetSection({ ctx: this.ctx, group, admin: this.admin });
    put(this.detail, h("div", { class: "card" },
      h("h2", { class: "groups-name", "data-group-name": group.name }, group.name),
      group.description ? h("p", {}, group.description) : null,
      h("p", { class: "muted" }, `${group.members_count} member${group.members_count === 1 ? "" : "s"} · created `,
        h("time", { datetime: group.created_at }, formatTime(group.created_at))),
      h("p", { class: "groups-models" }, h("strong", {}, "Models: "), group.models === null || group.models === undefined
        ? "any (no restriction)" : group.models.length ? group.models.join(", ") : "none")),
    this.members.element,
    this.budget.element,
    this.admin ? this.editForm(group) : null);
    this.members.load();
    this.budget.load();
  }

  createForm() {
    const name = h("input", { name: "name", required: true, maxlength: "64", autocomplete: "off", spellcheck: "false" });
    const description = h("textarea", { name: "description", rows: "2", maxlength: "2000" });
    const problem = h("div", { class: "form-error", role: "alert" });
    const form = h("form", { class: "card", "aria-labelledby": "groups-create-title", novalidate: true,
      onsubmit: async (event) => {
        event.preventDefault();
        problem.textContent = "";
        try {
          const group = await this.ctx.api("/api/groups", { method: "POST",
            body: { name: name.value.trim(), description: description.value } });
          this.ctx.toast(`Group ${group.name} created.`, "success");
          form.reset();
          this.ctx.navigate(`#/groups/${group.id}`);
        } catch (error) {
          problem.textContent = errorText(error);
          name.focus();
        }
      } },
    h("h2", { id: "groups-create-title" }, "New group"),
    field("Group name", name, "1-64 letters, digits, - or _."),
    field("Description", description),
    problem, h("button", { type: "submit", class: "primary" }, "Create group"));
    return form;
  }

  // An admin's form for the group itself: name, description, the models its members may use, and delete.
  editForm(group) {
    const name = h("input", { value: group.name, maxlength: "64", autocomplete: "off", spellcheck: "false" });
    const description = h("textarea", { rows: "2", maxlength: "2000", value: group.description || "" });
    const limited = h("input", { type: "checkbox", checked: Array.isArray(group.models) });
    const models = h("textarea", { rows: "4", spellcheck: "false", value: (group.models || []).join("\n"),
      disabled: !Array.isArray(group.models) });
    limited.addEventListener("change", () => { models.disabled = !limited.checked; });
    const problem = h("div", { class: "form-error", role: "alert" });
    const save = async (event) => {
      event.preventDefault();
      problem.textContent = "";
      const body = { name: name.value.trim(), description: description.value,
        models: limited.checked ? models.value.split("\n").map((line) => line.trim()).filter(Boolean) : null };
      try {
        const saved = await this.ctx.api(`/api/groups/${group.id}`, { method: "PATCH", body });
        this.ctx.toast(`Group ${saved.name} saved.`, "success");
        await this.load();
      } catch (error) {
        problem.textContent = errorText(error);
      }
    };
    const remove = async () => {
      if (!(await confirmDialog(`Delete the group ${group.name}? Its members lose what was shared with it.`,
        { confirmLabel: "Delete" }))) return;
      try {
        await this.ctx.api(`/api/groups/${group.id}`, { method: "DELETE" });
        this.ctx.toast(`Group ${group.name} deleted.`, "success");
        this.ctx.navigate("#/groups");
      } catch (error) {
        this.ctx.toast(`The group was not deleted: ${errorText(error)}`, "error");
      }
    };
    return h("form", { class: "card groups-edit", "aria-labelledby": "groups-edit-title", novalidate: true, onsubmit: save },
      h("h2", { id: "groups-edit-title" }, "Edit the group"),
      field("Name", name),
      field("Description", description),
      checkbox("Limit the models its members may use", limited),
      field("Allowed models", models, hint("One per line: an alias, connection/model, agent, workflow:*, agent:*; * matches any "
        + "text. Unticked: any model.")),
      problem,
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Save group"),
        h("button", { type: "button", class: "danger", onclick: remove }, "Delete group")));
  }
}
