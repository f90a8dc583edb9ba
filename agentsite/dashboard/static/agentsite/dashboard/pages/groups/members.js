// One group's members (GET /api/groups/:id/members): each with their role, which an admin or the group's manager
// changes (member or manager) and removes; and the form that adds one. Admins name the user (their names are
// suggested from GET /api/users, admins' only); a manager who is not an admin gives the user's id, since no
// other user lookup exists (docs/dashboard.md, Groups).
import { findUser } from "../../api.js";
import { confirmDialog, errorBox, errorText, field, h, labelCells, loading, put } from "../../ui.js";

// What each member role is called; the roles themselves, least first, are GET /api/meta's access.member_roles.
const ROLE_LABELS = { member: "Member", manager: "Manager" };
const roleLabel = (role) => ROLE_LABELS[role] || role;

export class MembersSection {
  constructor({ ctx, group, roles, manages, admin, users, onChange }) {
    this.ctx = ctx;
    this.roles = roles;
    this.group = group;
    this.manages = manages;
    this.admin = admin;
    this.onChange = onChange;
    this.list = h("div", { class: "groups-members" }, loading("Loading members…"));
    this.datalist = h("datalist", { id: `group-users-${group.id}` });
    this.element = h("section", { class: "card", "aria-labelledby": "groups-members-title" },
      h("h2", { id: "groups-members-title" }, "Members"), this.list, manages ? this.addForm() : null);
    this.suggest(users);
  }

  suggest(users) {
    if (!users) return;
    put(this.datalist, users.map((user) => h("option", { value: user.username })));
  }

  path(suffix = "") {
    return `/api/groups/${this.group.id}/members${suffix}`;
  }

  async load() {
    let members;
    try {
      members = await this.ctx.api(this.path());
    } catch (error) {
      put(this.list, errorBox(`The members could not be loaded: ${errorText(error)}`, () => this.load()));
      return;
    }
    if (!members.length) {
      put(this.list, h("p", { class: "empty" }, "No members yet."));
      return;
    }
    const table = h("table", { class: "groups-members-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "User"), h("th", { scope: "col" }, "Id"),
        h("th", { scope: "col" }, "Role"),
        this.manages ? h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")) : null)),
      h("tbody", {}, members.map((member) => this.row(member))));
    labelCells(table);
    put(this.list, h("div", { class: "table-wrap" }, table));
  }

  row(member) {
    const name = member.user.username;
    let role = h("span", { class: "badge" }, roleLabel(member.role));
    if (this.manages) {
      role = h("select", { "aria-label": `Role of ${name}` },
        this.roles.map((value) => h("option", { value, selected: value === member.role }, roleLabel(value))));
      role.addEventListener("change", () => this.setRole(member, role));
    }
    return h("tr", { dataset: { memberId: String(member.user.id) } },
      h("th", { scope: "row", class: "groups-member-name" }, name),
      h("td", { class: "num" }, String(member.user.id)),
      h("td", {}, role),
      this.manages ? h("td", {}, h("button", { type: "button", class: "small danger", "aria-label": `Remove ${name}`,
        onclick: () => this.remove(member) }, "Remove")) : null);
  }

  async setRole(member, select) {
    try {
      await this.ctx.api(this.path(`/${member.user.id}`), { method: "PATCH", body: { role: select.value } });
      member.role = select.value;
      this.ctx.toast(`${member.user.username} is now a ${select.value} of ${this.group.name}.`, "success");
    } catch (error) {
      select.value = member.role;
      this.ctx.toast(`The role was not changed: ${errorText(error)}`, "error");
    }
  }

  async remove(member) {
    const name = member.user.username;
    if (!(await confirmDialog(`Remove ${name} from ${this.group.name}?`, { confirmLabel: "Remove" }))) return;
    try {
      await this.ctx.api(this.path(`/${member.user.id}`), { method: "DELETE" });
      this.ctx.toast(`${name} removed from ${this.group.name}.`, "success");
      this.onChange();
    } catch (error) {
      this.ctx.toast(`${name} was not removed: ${errorText(error)}`, "error");
    }
  }

  addForm() {
    const user = h("input", { autocomplete: "off", spellcheck: "false", required: true,
      list: this.admin ? this.datalist.id : null, inputmode: this.admin ? null : "numeric" });
    const role = h("select", {}, this.roles.map((value) => h("option", { value }, roleLabel(value))));
    const problem = h("div", { class: "form-error", role: "alert" });
    const submit = async (event) => {
      event.preventDefault();
      problem.textContent = "";
      try {
        const found = await findUser(user.value, { admin: this.admin });
        const member = await this.ctx.api(this.path(), { method: "POST", body: { user: found.id, role: role.value } });
        this.ctx.toast(`${member.user.username} added to ${this.group.name}.`, "success");
        this.onChange();
      } catch (error) {
        problem.textContent = errorText(error);
        user.focus();
      }
    };
    return h("form", { class: "groups-add", "aria-labelledby": "groups-add-title", novalidate: true, onsubmit: submit },
      h("h3", { id: "groups-add-title" }, "Add a member"),
      this.datalist,
      h("div", { class: "groups-add-row" },
        field(this.admin ? "User" : "User id", user, this.admin ? "A username (suggested as you type) or a user id."
          : "The user's numeric id: ask them, or an administrator."),
        field("Member role", role),
        h("button", { type: "submit", class: "primary" }, "Add member")),
      problem);
  }
}
