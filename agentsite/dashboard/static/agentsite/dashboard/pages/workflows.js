// Workflows: `#/workflows` lists them (create, import from a file, delete); `#/workflows/<id>` is the
// editor (pages/workflows/editor.js): the drawn graph, the JSON view, node forms, runs, export.
import {
  confirmDialog, errorBox, errorText, field, formatTime, h, hint, loading, pageHeader, put,
} from "../ui.js";
import { mountEditor } from "./workflows/editor.js";

export async function mount(root, ctx) {
  const [id] = ctx.route || [];
  if (id) return mountEditor(root, ctx, decodeURIComponent(id));
  const page = new WorkflowList(root, ctx);
  await page.start();
  return () => { page.stopped = true; };
}

class WorkflowList {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.stopped = false;
  }

  async start() {
    this.listBox = h("section", { class: "wf-list", "aria-labelledby": "wf-list-title" });
    this.approvalBox = h("section", { class: "wf-approvals", "aria-labelledby": "wf-approvals-title", hidden: true });
    this.createError = h("div", { class: "form-error", role: "alert", hidden: true });
    this.importError = h("div", { class: "form-error", role: "alert", hidden: true });
    const create = h("form", { class: "card wf-create", "aria-labelledby": "wf-create-title", novalidate: true,
      onsubmit: (event) => { event.preventDefault(); this.create(event.currentTarget); } },
    h("h2", { id: "wf-create-title" }, "New workflow"),
    field("Name", h("input", { name: "name", required: true, maxlength: "64", pattern: "[A-Za-z0-9_\\-]{1,64}",
      autocomplete: "off", spellcheck: "false" }), hint("1-64 letters, digits, - or _; unique among yours.")),
    field("Description", h("textarea", { name: "description", rows: "2", maxlength: "2000" })),
    this.createError,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Create workflow")));
    const fileInput = h("input", { type: "file", accept: ".json,application/json", name: "file",
      onchange: (event) => this.importFile(event.currentTarget) });
    const importForm = h("div", { class: "card wf-import", role: "group", "aria-labelledby": "wf-import-title" },
      h("h2", { id: "wf-import-title" }, "Import"),
      field("Import a workflow file", fileInput, hint("A file exported from this or another agentsite.")),
      this.importError);
    put(this.root, 
      pageHeader("Workflows", "Graphs of typed nodes that run on an input."),
      this.approvalBox,
      h("div", { class: "wf-list-layout" }, this.listBox, h("div", { class: "wf-side" }, create, importForm)));
    await Promise.all([this.load(), this.loadApprovals()]);
  }

  // The approvals waiting for this user (GET /api/approvals): each with its prompt, an optional comment,
  // and Approve / Reject. Hidden when there are none.
  async loadApprovals() {
    let approvals;
    try {
      approvals = (await this.ctx.api("/api/approvals?limit=100")).results;
    } catch (error) {
      if (!this.stopped) {
        this.approvalBox.hidden = false;
        put(this.approvalBox, h("h2", { id: "wf-approvals-title" }, "Waiting for your approval"),
          errorBox(`The approvals could not be loaded: ${errorText(error)}`, () => this.loadApprovals()));
      }
      return;
    }
    if (this.stopped) return;
    this.approvalBox.hidden = approvals.length === 0;
    put(this.approvalBox, h("h2", { id: "wf-approvals-title" }, `Waiting for your approval (${approvals.length})`),
      h("ul", { class: "wf-approval-items" }, ...approvals.map((approval) => this.approvalItem(approval))));
  }

  approvalItem(approval) {
    const comment = h("input", { name: "comment", maxlength: "10000", autocomplete: "off" });
    const buttons = [];
    const decide = async (decision) => {
      for (const button of buttons) button.disabled = true;
      try {
        await this.ctx.api(`/api/approvals/${encodeURIComponent(approval.id)}`, { method: "POST",
          body: { decision, comment: comment.value } });
        this.ctx.toast(`${decision === "approve" ? "Approved" : "Rejected"}: ${approval.workflow_name} goes on.`, "success");
      } catch (error) {
        this.ctx.toast(`Not decided: ${errorText(error)}`, "error");
      }
      window.dispatchEvent(new CustomEvent("agentsite:approvals"));
      await this.loadApprovals();
    };
    buttons.push(h("button", { type: "button", class: "primary", onclick: () => decide("approve"),
      "aria-label": `Approve ${approval.workflow_name} at ${approval.node}` }, "Approve"));
    buttons.push(h("button", { type: "button", class: "danger", onclick: () => decide("reject"),
      "aria-label": `Reject ${approval.workflow_name} at ${approval.node}` }, "Reject"));
    return h("li", { class: "card wf-approval", "data-approval-id": approval.id },
      h("div", { class: "wf-approval-head" },
        h("a", { href: `#/workflows/${approval.workflow_id}`, class: "wf-item-name" }, approval.workflow_name),
        h("span", { class: "badge status waiting" }, approval.node)),
      h("p", { class: "wf-approval-prompt" }, approval.prompt || "Approve this run?"),
      h("small", { class: "muted" }, "Asked ", h("time", { datetime: approval.created_at }, formatTime(approval.created_at)),
        approval.expires_at ? ` · ${approval.on_timeout === "approve" ? "approved" : "rejected"} by itself at ${formatTime(approval.expires_at)}` : ""),
      field("Comment (optional)", comment),
      h("div", { class: "actions" }, ...buttons));
  }

  async load() {
    put(this.listBox, h("h2", { id: "wf-list-title" }, "All workflows"), loading("Loading workflows…"));
    let workflows;
    try {
      workflows = (await this.ctx.api("/api/workflows?limit=200")).results;
    } catch (error) {
      if (!this.stopped) {
        put(this.listBox, h("h2", { id: "wf-list-title" }, "All workflows"),
          errorBox(`The workflows could not be loaded: ${errorText(error)}`, () => this.load()));
      }
      return;
    }
    if (this.stopped) return;
    const title = h("h2", { id: "wf-list-title" }, "All workflows");
    if (!workflows.length) {
      put(this.listBox, title, h("p", { class: "empty" }, "No workflows yet: create one or import a file."));
      return;
    }
    put(this.listBox, title, h("ul", { class: "wf-items" }, ...workflows.map((workflow) => h("li", {
      class: "card wf-item", "data-workflow-id": workflow.id },
    h("div", {}, h("a", { href: `#/workflows/${workflow.id}`, class: "wf-item-name" }, workflow.name),
      workflow.description ? h("p", { class: "muted" }, workflow.description) : null,
      h("small", { class: "muted" }, "Updated ", h("time", { datetime: workflow.updated_at }, formatTime(workflow.updated_at)),
        this.sharedBy(workflow))),
    h("div", { class: "actions" },
      this.owns(workflow) ? h("button", { type: "button", "aria-label": `Share ${workflow.name}`,
        onclick: () => this.ctx.share({ kind: "workflow", path: `/api/workflows/${workflow.id}`, label: workflow.name,
          onChange: () => this.load() }) }, "Share") : null,
      this.owns(workflow) ? h("button", { type: "button", class: "danger", "aria-label": `Delete ${workflow.name}`,
        onclick: () => this.remove(workflow) }, "Delete") : null)))));
  }

  // The owner (or an admin: `role` owner) shares and deletes; a workflow listed without a role is the user's own.
  owns(workflow) {
    return !workflow.role || workflow.role === "owner";
  }

  // Someone else's workflow says whose it is and what the reader may do with it.
  sharedBy(workflow) {
    if (!workflow.owner || String(workflow.owner.id) === String(this.ctx.user?.id)) return null;
    return h("span", { class: "wf-owner" }, ` · owner ${workflow.owner.username} · ${workflow.role || "viewer"}`);
  }

  async create(form) {
    this.createError.hidden = true;
    const name = form.elements.name.value.trim();
    try {
      // A new workflow starts with its input node; the editor adds the rest.
      const workflow = await this.ctx.api("/api/workflows", { method: "POST", body: {
        name, description: form.elements.description.value,
        nodes: [{ id: "input", type: "input", name: "input", config: {}, position: { x: 40, y: 60 } }], edges: [] } });
      this.ctx.toast(`Workflow ${workflow.name} created.`, "success");
      this.ctx.navigate(`#/workflows/${workflow.id}`);
    } catch (error) {
      form.elements.name.setAttribute("aria-invalid", "true");
      this.createError.textContent = errorText(error);
      this.createError.hidden = false;
    }
  }

  async importFile(input) {
    this.importError.hidden = true;
    const file = input.files?.[0];
    if (!file) return;
    let document;
    try {
      document = JSON.parse(await file.text());
    } catch (error) {
      this.importError.textContent = `${file.name} is not JSON: ${error.message}`;
      this.importError.hidden = false;
      input.value = "";
      return;
    }
    try {
      const workflow = await this.ctx.api("/api/workflows/import", { method: "POST", body: document });
      this.ctx.toast(`Workflow ${workflow.name} imported.`, "success");
      this.ctx.navigate(`#/workflows/${workflow.id}`);
    } catch (error) {
      this.importError.textContent = `${file.name} was not imported: ${errorText(error)}`;
      this.importError.hidden = false;
    } finally {
      input.value = "";
    }
  }

  async remove(workflow) {
    if (!(await confirmDialog(`Delete the workflow ${workflow.name} and its runs?`, { confirmLabel: "Delete" }))) return;
    try {
      await this.ctx.api(`/api/workflows/${workflow.id}`, { method: "DELETE" });
      this.ctx.toast(`Workflow ${workflow.name} deleted.`, "success");
      await this.load();
    } catch (error) {
      this.ctx.toast(`Could not delete ${workflow.name}: ${errorText(error)}`, "error");
    }
  }
}
