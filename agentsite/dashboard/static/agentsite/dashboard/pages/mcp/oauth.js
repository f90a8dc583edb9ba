// Remote MCP servers that sign in with OAuth (docs/api.md, agentsite as an OAuth client of remote MCP servers):
// the connect form's OAuth fields and what they send, a server's OAuth state in the list, and the word shown
// when the browser comes back from the remote's consent (the callback sends it to #/mcp?connected=<name> or
// #/mcp?oauth_error=<code>).
import { field, formatTime, h } from "../../ui.js";

// What the callback's error codes mean to the admin; another code is named as it is, after "an error".
const OAUTH_ERRORS = {
  access_denied: "the remote server's sign-in was refused or cancelled",
  invalid_state: "the sign-in had expired (it is good for 10 minutes) or was already used: connect again",
  invalid_issuer: "the answer did not come from the authorization server the sign-in went to (its code was not "
    + "used): connect again, and check that nothing stands between this server and the remote's",
  invalid_request: "the remote authorization server refused the request",
  mcp_connect_failed: "the remote gave no tokens, or the server could not be reached with them",
  server_error: "the remote authorization server failed",
  temporarily_unavailable: "the remote authorization server is unavailable for now",
};

// The OAuth fields of the connect form (shown for Authentication: OAuth). Everything is optional: without a
// client ID agentsite registers itself (RFC 7591) at the authorization server the remote names.
export function oauthFields(origin) {
  const text = (name, extra = {}) => h("input", { name, autocomplete: "off", spellcheck: "false", ...extra });
  return h("div", { class: "mcp-oauth", hidden: true },
    field("Scopes (space-separated)", text("scopes", { placeholder: "read write" }),
      "Empty: the scopes the remote server asks for."),
    field("Client ID", text("client_id"), "Empty: agentsite registers itself at the remote's authorization server. "
      + `For a client made there by hand, its redirect URI is ${origin}/api/mcp/oauth/callback.`),
    field("Client secret", text("client_secret", { type: "password", autocomplete: "new-password" }),
      "With a client ID, if it has one; kept secret."),
    field("Authorization server", text("authorization_server", { type: "url", placeholder: "https://auth.example.com" }),
      "Only for a remote that does not say where to sign in (no protected-resource metadata)."));
}

// The OAuth part of POST /api/mcp/connect's body from the form; throws naming what is wrong.
export function oauthBody(elements) {
  const body = { auth: "oauth" };
  const scopes = elements.scopes.value.split(/[\s,]+/).filter(Boolean);
  if (scopes.length) body.scopes = scopes;
  for (const name of ["client_id", "client_secret", "authorization_server"]) {
    const value = elements[name].value.trim();
    if (value) body[name] = value;
  }
  if (body.client_secret && !body.client_id) throw new Error("A client secret needs its client ID.");
  return body;
}

// A server's OAuth state for the servers list (null for a server without OAuth).
export function oauthState(server) {
  const state = server.auth === "oauth" ? server.oauth : null;
  if (!state) return null;
  if (state.status === "authorized") {
    return h("p", { class: "hint mcp-oauth-state" }, "OAuth: authorized",
      state.expires_at ? [", token until ", h("time", { datetime: state.expires_at }, formatTime(state.expires_at))] : null);
  }
  return h("p", { class: "error-text mcp-oauth-state" }, "OAuth: needs authorization: its tools are left out until "
    + "an admin reconnects it.");
}

// The outcome the callback put in the address (#/mcp?connected=… or ?oauth_error=…), as {kind, text}; null
// when there is none.
export function oauthOutcome(hash) {
  const at = hash.indexOf("?");
  if (at < 0) return null;
  const query = new URLSearchParams(hash.slice(at + 1));
  const name = query.get("connected");
  if (name) return { kind: "success", text: `Connected ${name}: it is authorized and its tools are listed.` };
  const code = query.get("oauth_error");
  if (!code) return null;
  const server = query.get("server") || query.get("name");
  return { kind: "error", text: `The authorization of ${server || "the server"} did not finish: `
    + `${OAUTH_ERRORS[code] || "an error"} (${code}).` };
}
