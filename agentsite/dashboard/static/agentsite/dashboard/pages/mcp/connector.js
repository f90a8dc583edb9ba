// "Use agentsite as a connector": this server's MCP URL to copy, and what to do with it in the usual clients
// (docs/connectors.md says more). Every user sees it: a connector acts as the user who signs in and allows it,
// and then shows on the Keys page under Connected apps.
import { copyField, h } from "../../ui.js";

// The steps of each client, shortest first; `code` is shown as a block the user copies as it is.
function clientSteps(url) {
  const vscode = JSON.stringify({ servers: { agentsite: { type: "http", url } } }, null, 2);
  return [
    ["Claude", "Settings → Connectors → Add custom connector: give it a name and this URL, then Connect."],
    ["ChatGPT", "Settings → Apps → Advanced settings: turn on Developer mode. Then create an app with this URL and "
      + "OAuth as its authentication."],
    ["VS Code", "Add the server to .vscode/mcp.json (or MCP: Open User Configuration), then Start it:", vscode],
    ["MCP Inspector", "npx @modelcontextprotocol/inspector, then choose Streamable HTTP, paste this URL and Connect."],
  ];
}

// The panel; `origin` is the address this dashboard was opened at (location.origin).
export function connectorPanel(origin) {
  const url = `${origin}/mcp`;
  const { input: value, button: copy, status: copied } = copyField(url, "This server's MCP URL",
    { inputClass: "mcp-connector-url" });
  return h("section", { class: "card mcp-connector", "aria-labelledby": "mcp-connector-title" },
    h("h2", { id: "mcp-connector-title" }, "Use agentsite as a connector"),
    h("p", {}, "Add this server to Claude, ChatGPT, VS Code or another MCP client by its MCP URL:"),
    h("div", { class: "mcp-connector-row" }, value, copy), copied,
    h("ul", { class: "mcp-connector-steps" }, ...clientSteps(url).map(([client, text, code]) => h("li", {},
      h("strong", {}, client), `: ${text}`, code ? h("pre", { class: "mcp-connector-code" }, code) : null))),
    h("p", {}, "The app sends you here to sign in and allow it; it then shows under Keys → Connected apps, where "
      + "you can disconnect it."),
    origin.startsWith("http:")
      ? h("p", { class: "hint mcp-connector-https" }, "This address is http: VS Code and the MCP Inspector on a "
        + "machine that reaches it can use it, but Claude and ChatGPT connect from their own cloud and need an https "
        + "address they can reach (a TLS proxy in front of this server; docs/connectors.md).")
      : null);
}
