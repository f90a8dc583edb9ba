// MCP: the connected MCP servers (status, error, OAuth state, tools), every tool the agent can use, and the
// plugins; and this server's own MCP URL for using agentsite as a connector (mcp/connector.js). Admins connect
// (with headers or OAuth, mcp/oauth.js), reconnect and disconnect servers and reload plugins; a user sees the
// servers and tools read-only (the plugin list is an admin endpoint, so it is not asked for).
import {
  confirmDialog, errorBox, errorText, field, fieldErrors, formatTime, h, hint, labelCells, loading, pageHeader, put,
  usedBy,
} from "../ui.js";
import { connectorPanel } from "./mcp/connector.js";
import { oauthBody, oauthFields, oauthOutcome, oauthState } from "./mcp/oauth.js";

// The connect form's words for the access rule's visibilities (the list itself is GET /api/meta's).
const VISIBILITY_LABELS = { private: "Admins only", everyone: "Every user", shared: "Admins and those it is shared with" };

export async function mount(root, ctx) {
  const page = new McpPage(root, ctx);
  await page.start();
  return () => { page.stopped = true; };
}

function lines(text) {
  return text.split("\n").map((line) => line.trim()).filter(Boolean);
}

// "KEY=value" (env) or "Name: value" (headers) lines -> an object; throws naming the bad line.
function pairs(text, separator, what) {
  const result = {};
  for (const line of lines(text)) {
    const at = line.indexOf(separator);
    if (at <= 0) throw new Error(`${what}: "${line}" is not ${separator === "=" ? "KEY=value" : "Name: value"}.`);
    result[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return result;
}

class McpPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.admin = Boolean(ctx.user?.is_admin);
    this.stopped = false;
  }

  async start() {
    // The access rule's visibilities (GET /api/meta) for the connect form; admins only see it.
    this.visibilities = this.admin ? (await this.ctx.meta()).access.visibilities : [];
    this.serversBox = h("section", { class: "mcp-servers", "aria-labelledby": "mcp-servers-title" });
    this.toolsBox = h("section", { class: "mcp-tools", "aria-labelledby": "mcp-tools-title" });
    this.pluginsBox = h("section", { class: "mcp-plugins", "aria-labelledby": "mcp-plugins-title" });
    put(this.root,
      pageHeader("MCP and plugins", "Tool servers the agent connects to, the tools they offer, and the plugins loaded from the plugin directory."),
      this.outcome(),
      this.admin ? null : h("p", { class: "notice", role: "note" },
        "You can see the servers and tools. Only an admin can connect or disconnect servers and manage plugins."),
      h("div", { class: "mcp-layout" }, this.serversBox,
        h("div", { class: "mcp-aside" }, connectorPanel(location.origin), this.admin ? this.connectForm() : null),
        this.toolsBox, this.pluginsBox));
    await Promise.all([this.loadServers(), this.loadTools(), this.loadPlugins()]);
  }

  // Back from a remote server's consent: what the callback says (#/mcp?connected=… or ?oauth_error=…), shown
  // once; the address goes back to #/mcp, so a reload does not say it again.
  outcome() {
    const outcome = oauthOutcome(location.hash);
    if (!outcome) return null;
    history.replaceState(null, "", "#/mcp");
    this.ctx.toast(outcome.text, outcome.kind);
    return h("p", { class: outcome.kind === "error" ? "form-error mcp-outcome" : "notice mcp-outcome",
      role: outcome.kind === "error" ? "alert" : "status" }, outcome.text);
  }

  // --- servers ---------------------------------------------------------------------------------------

  async loadServers() {
    const title = h("h2", { id: "mcp-servers-title" }, "Servers");
    put(this.serversBox, title, loading("Loading servers…"));
    let servers;
    try {
      servers = (await this.ctx.api("/api/mcp/servers")).servers;
    } catch (error) {
      if (!this.stopped) put(this.serversBox, title, errorBox(`The servers could not be loaded: ${errorText(error)}`, () => this.loadServers()));
      return;
    }
    if (this.stopped) return;
    if (!servers.length) {
      put(this.serversBox, title, h("p", { class: "empty" }, "No MCP server is connected."));
      return;
    }
    put(this.serversBox, title, h("div", { class: "table-wrap" }, h("table", { class: "mcp-server-table" },
      h("thead", {}, h("tr", {}, ...["Name", "Transport", "Where", "Status", "Tools", ...(this.admin ? [""] : [])]
        .map((label) => h("th", { scope: "col" }, label)))),
      h("tbody", {}, ...servers.map((server) => h("tr", { "data-server": server.name },
        h("th", { scope: "row" }, server.name),
        h("td", {}, server.transport),
        h("td", {}, h("code", {}, server.url || server.command),
          server.args_count ? ` + ${server.args_count} argument${server.args_count === 1 ? "" : "s"} (not shown)` : null,
          server.visibility ? h("p", { class: "hint mcp-used-by" }, `Used by: ${usedBy(server)}`) : null),
        h("td", {}, h("span", { class: `badge status ${server.status === "connected" ? "ok" : "error"}` }, server.status),
          server.error ? h("p", { class: "error-text" }, server.error) : null, oauthState(server)),
        h("td", {}, String(server.tools)),
        this.admin ? h("td", {}, h("div", { class: "actions" },
          // Who may call its tools: the shell's share dialog (a server takes viewer grants only, GET /api/meta
          // says); it belongs to the deployment, so there is no transfer.
          h("button", { type: "button", "aria-label": `Share ${server.name}`, onclick: () => this.ctx.share({
            kind: "mcp_server", path: `/api/mcp/servers/${encodeURIComponent(server.name)}`, label: server.name,
            transfer: false, onChange: () => this.loadServers() }) }, "Share"),
          server.oauth?.status === "needs_authorization" ? h("button", { type: "button", class: "primary",
            "aria-label": `Reconnect ${server.name}`, onclick: (event) => this.reconnect(server.name, event.target) }, "Reconnect") : null,
          h("button", { type: "button", class: "danger", "aria-label": `Disconnect ${server.name}`,
            onclick: () => this.disconnect(server.name) }, "Disconnect"))) : null))))));
    labelCells(this.serversBox.querySelector("table"));
  }

  connectForm() {
    const error = h("div", { class: "form-error", role: "alert", hidden: true });
    const transport = h("select", { name: "transport" },
      h("option", { value: "stdio" }, "stdio (a command)"),
      h("option", { value: "streamable-http" }, "Streamable HTTP (a URL)"),
      h("option", { value: "sse" }, "SSE (a URL)"));
    const commandFields = h("div", { class: "mcp-stdio" },
      field("Command", h("input", { name: "command", autocomplete: "off", spellcheck: "false", placeholder: "uvx" })),
      field("Arguments (one per line)", h("textarea", { name: "args", rows: "2", spellcheck: "false", placeholder: "mcp-server-time" })),
      field("Environment (KEY=value per line)", h("textarea", { name: "env", rows: "2", spellcheck: "false" }),
        hint("Kept secret: never shown again.")));
    // A URL server authenticates with nothing, fixed headers, or OAuth (agentsite signs in at the remote).
    const auth = h("select", { name: "auth" },
      h("option", { value: "none" }, "None"),
      h("option", { value: "headers" }, "Headers (an API key or token)"),
      h("option", { value: "oauth" }, "OAuth (sign in at the remote server)"));
    const headerFields = h("div", { class: "mcp-headers", hidden: true },
      field("Headers (Name: value per line)", h("textarea", { name: "headers", rows: "2", spellcheck: "false" }),
        hint("For example Authorization: Bearer …; kept secret.")));
    const oauth = oauthFields(location.origin);
    const urlFields = h("div", { class: "mcp-url", hidden: true },
      field("URL", h("input", { name: "url", type: "url", autocomplete: "off", spellcheck: "false", placeholder: "https://example.com/mcp" })),
      field("Authentication", auth), headerFields, oauth);
    const shown = () => {
      commandFields.hidden = transport.value !== "stdio";
      urlFields.hidden = transport.value === "stdio";
      headerFields.hidden = auth.value !== "headers";
      oauth.hidden = auth.value !== "oauth";
    };
    transport.addEventListener("change", shown);
    auth.addEventListener("change", shown);
    const button = h("button", { type: "submit", class: "primary" }, "Connect");
    const form = h("form", { class: "card mcp-connect", "aria-labelledby": "mcp-connect-title", novalidate: true,
      onsubmit: async (event) => {
        event.preventDefault();
        error.hidden = true;
        let body;
        try {
          body = this.connectBody(form);
        } catch (problem) {
          error.textContent = problem.message;
          error.hidden = false;
          return;
        }
        button.disabled = true;
        button.textContent = "Connecting…";
        try {
          const server = await this.ctx.api("/api/mcp/connect", { method: "POST", body });
          if (server.status === "needs_authorization") {
            // 202: sign in at the remote in this tab; its callback brings the browser back to #/mcp.
            location.assign(server.authorization_url);
            return;
          }
          this.ctx.toast(`Connected ${server.name}: ${server.tools} tools.`, "success");
          form.reset();
          transport.dispatchEvent(new Event("change"));
          await Promise.all([this.loadServers(), this.loadTools()]);
        } catch (problem) {
          for (const name of Object.keys(fieldErrors(problem))) form.elements[name]?.setAttribute("aria-invalid", "true");
          error.textContent = errorText(problem);
          error.hidden = false;
        } finally {
          button.disabled = false;
          button.textContent = "Connect";
        }
      } },
    h("h2", { id: "mcp-connect-title" }, "Connect a server"),
    field("Server name", h("input", { name: "name", required: true, maxlength: "32", autocomplete: "off", spellcheck: "false" })),
    field("Transport", transport), commandFields, urlFields,
    field("Who may use it", h("select", { name: "visibility" },
      this.visibilities.map((value) => h("option", { value }, VISIBILITY_LABELS[value] || value)))),
    field("Users (one username per line)", h("textarea", { name: "users", rows: "2", spellcheck: "false" }),
      hint("With Shared: each may use it (groups: Share, once connected). Its tools run with the environment and "
        + "headers you give it.")),
    error,
    h("div", { class: "actions" }, button));
    return form;
  }

  connectBody(form) {
    const elements = form.elements;
    for (const element of elements) element.removeAttribute?.("aria-invalid");
    const body = { name: elements.name.value.trim() };
    if (!body.name) throw new Error("Give the server a name.");
    if (elements.transport.value === "stdio") {
      body.command = elements.command.value.trim();
      if (!body.command) throw new Error("Give the command that starts the server.");
      const args = lines(elements.args.value);
      if (args.length) body.args = args;
      const env = pairs(elements.env.value, "=", "Environment");
      if (Object.keys(env).length) body.env = env;
    } else {
      body.url = elements.url.value.trim();
      body.transport = elements.transport.value;
      if (!body.url) throw new Error("Give the server's URL.");
      if (elements.auth.value === "headers") {
        const headers = pairs(elements.headers.value, ":", "Headers");
        if (!Object.keys(headers).length) throw new Error("Give the headers, or choose None.");
        body.headers = headers;
      } else if (elements.auth.value === "oauth") {
        Object.assign(body, oauthBody(elements));
      }
    }
    body.visibility = elements.visibility.value;
    const users = lines(elements.users.value);
    if (users.length) body.users = users;
    return body;
  }

  // An OAuth server whose refresh failed: a new consent at the remote (POST …/reconnect answers where).
  async reconnect(name, button) {
    button.disabled = true;
    try {
      const answer = await this.ctx.api(`/api/mcp/servers/${encodeURIComponent(name)}/reconnect`, { method: "POST" });
      location.assign(answer.authorization_url);
    } catch (error) {
      button.disabled = false;
      this.ctx.toast(`Could not reconnect ${name}: ${errorText(error)}`, "error");
    }
  }

  async disconnect(name) {
    if (!(await confirmDialog(`Disconnect the MCP server ${name}? Its tools stop being offered.`, { confirmLabel: "Disconnect" }))) return;
    try {
      await this.ctx.api("/api/mcp/disconnect", { method: "POST", body: { name } });
      this.ctx.toast(`Disconnected ${name}.`, "success");
      await Promise.all([this.loadServers(), this.loadTools()]);
    } catch (error) {
      this.ctx.toast(`Could not disconnect ${name}: ${errorText(error)}`, "error");
    }
  }

  // --- tools -----------------------------------------------------------------------------------------

  async loadTools() {
    const title = h("h2", { id: "mcp-tools-title" }, "Tools");
    put(this.toolsBox, title, loading("Loading tools…"));
    let tools;
    try {
      tools = (await this.ctx.api("/api/mcp/tools")).tools;
    } catch (error) {
      if (!this.stopped) put(this.toolsBox, title, errorBox(`The tools could not be loaded: ${errorText(error)}`, () => this.loadTools()));
      return;
    }
    if (this.stopped) return;
    const groups = new Map();
    for (const item of tools) groups.set(item.server, [...(groups.get(item.server) || []), item.tool]);
    put(this.toolsBox, title, tools.length ? h("div", { class: "mcp-tool-groups" }, ...[...groups].map(([server, items]) =>
      h("details", { class: "mcp-tool-group", open: groups.size <= 3 },
        h("summary", {}, `${server} (${items.length})`),
        h("ul", { class: "mcp-tool-list" }, ...items.map((tool) => h("li", {},
          h("code", {}, tool.name), tool.description ? ` — ${tool.description}` : "",
          h("details", { class: "schema" }, h("summary", {}, "Input schema"),
            h("pre", {}, JSON.stringify(tool.inputSchema, null, 2))))))))) : h("p", { class: "empty" }, "No tools."));
  }

  // --- plugins ---------------------------------------------------------------------------------------

  async loadPlugins() {
    const title = h("h2", { id: "mcp-plugins-title" }, "Plugins");
    if (!this.admin) {
      put(this.pluginsBox, title, h("p", { class: "muted" }, "Plugins are managed by admins."));
      return;
    }
    put(this.pluginsBox, title, loading("Loading plugins…"));
    try {
      this.renderPlugins((await this.ctx.api("/api/plugins")).plugins);
    } catch (error) {
      if (!this.stopped) put(this.pluginsBox, title, errorBox(`The plugins could not be loaded: ${errorText(error)}`, () => this.loadPlugins()));
    }
  }

  renderPlugins(plugins) {
    if (this.stopped) return;
    const reloadAll = h("button", { type: "button", onclick: () => this.reload(null, reloadAll) }, "Reload all plugins");
    const head = h("div", { class: "section-head" }, h("h2", { id: "mcp-plugins-title" }, "Plugins"), reloadAll);
    if (!plugins.length) {
      put(this.pluginsBox, head, h("p", { class: "empty" }, "No plugins in the plugin directory."));
      return;
    }
    put(this.pluginsBox, head, h("ul", { class: "mcp-plugin-list" }, ...plugins.map((plugin) => {
      const button = h("button", { type: "button", class: "small", "aria-label": `Reload ${plugin.name}`,
        onclick: () => this.reload(plugin.name, button) }, "Reload");
      return h("li", { class: `card plugin status-${plugin.status}`, "data-plugin": plugin.name },
        h("div", { class: "plugin-head" }, h("strong", {}, plugin.name),
          h("span", { class: `badge status ${plugin.status === "loaded" ? "ok" : "error"}` }, plugin.status), button),
        h("p", { class: "muted" }, h("code", {}, plugin.path),
          plugin.loaded_at ? [" · ", h("time", { datetime: plugin.loaded_at }, formatTime(plugin.loaded_at))] : null),
        plugin.error ? h("pre", { class: "error-text plugin-error" }, plugin.error) : null,
        plugin.tools.length ? h("p", {}, "Tools: ", ...plugin.tools.flatMap((tool, index) => [index ? ", " : "", h("code", {}, tool)])) : null);
    })));
  }

  async reload(name, button) {
    button.disabled = true;
    try {
      const data = await this.ctx.api("/api/plugins/reload", { method: "POST", body: name ? { name } : {} });
      this.renderPlugins(data.plugins);
      this.ctx.toast(name ? `Reloaded ${name}.` : "Reloaded every plugin.", "success");
      this.loadTools();
    } catch (error) {
      button.disabled = false;
      this.ctx.toast(`Reload failed: ${errorText(error)}`, "error");
    }
  }
}
