// Consent: where GET /oauth/authorize sends the browser (#/consent/<id>) when an app (an MCP connector) asks to
// use agentsite as the signed-in user (docs/api.md, MCP authorization). It shows the app's name, the host the
// browser goes back to (large: an app may call itself anything, its redirect host it cannot fake), what the
// scope allows and who is signed in; Allow or Deny is decided once, and the browser then leaves for the app's
// redirect URI. A visitor who is not signed in signs in first: the shell keeps the pending consent (app.js).
import { errorText, h, loading, put } from "../ui.js";

export async function mount(root, ctx) {
  const page = new ConsentPage(root, ctx);
  await page.start();
  return () => { page.stopped = true; };
}

class ConsentPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.id = ctx.route[0] || "";
    this.stopped = false;
  }

  async start() {
    this.box = h("section", { class: "card consent", "aria-labelledby": "consent-title" });
    put(this.root, h("div", { class: "consent-page" }, this.box));
    put(this.box, loading("Loading the request…"));
    let consent;
    try {
      consent = await this.ctx.api(`/api/oauth/consents/${encodeURIComponent(this.id)}`);
    } catch (error) {
      if (!this.stopped) this.failed(error);
      return;
    }
    if (!this.stopped) this.render(consent);
  }

  failed(error) {
    const gone = error.status === 404;
    put(this.box, h("h1", { id: "consent-title", tabindex: "-1" }, gone ? "This request has expired" : "The request could not be loaded"),
      h("p", { class: "form-error", role: "alert" }, gone
        ? "This authorization request is unknown, already decided or expired (requests last 10 minutes). Go back to the app and connect again."
        : errorText(error)),
      h("p", {}, h("a", { href: "#/chat" }, "Go to the dashboard")));
    this.box.querySelector("h1").focus();
  }

  render(consent) {
    const { client } = consent;
    const user = this.ctx.user?.username || "";
    const problem = h("p", { class: "form-error", role: "alert" });
    const allow = h("button", { type: "button", class: "primary", onclick: () => this.decide(true, buttons, problem) }, "Allow");
    const deny = h("button", { type: "button", onclick: () => this.decide(false, buttons, problem) }, "Deny");
    const buttons = [deny, allow];
    const title = h("h1", { id: "consent-title", tabindex: "-1" }, h("span", { class: "consent-app" }, client.name || client.client_id),
      " wants to use your agentsite account");
    put(this.box, title,
      h("div", { class: "consent-redirect" },
        h("p", { class: "consent-label" }, "After your decision you go to"),
        h("p", { class: "consent-host" }, client.redirect_host || "(unknown host)"),
        h("p", { class: "hint" }, "Allow only if you started this from an app you trust and this is its address.")),
      h("h2", { class: "consent-subtitle" }, "It will be able to"),
      h("ul", { class: "consent-scopes" }, consent.scope.map((item) =>
        h("li", { "data-scope": item.name }, h("strong", {}, item.name), ": ", item.description))),
      consent.resource ? h("p", { class: "hint" }, "On ", h("code", {}, consent.resource), ".") : null,
      h("p", { class: "consent-who" }, "Signed in as ", h("strong", { class: "consent-user" }, user), ". Not you? ",
        h("button", { type: "button", class: "link", onclick: () => this.ctx.logout() }, "Sign out")),
      problem,
      h("div", { class: "actions consent-actions" }, buttons));
    // The title first (what asks, and for what), not Allow: an Enter pressed in passing must not allow an app.
    title.focus();
  }

  async decide(allow, buttons, problem) {
    for (const button of buttons) button.disabled = true;
    problem.textContent = "";
    let answer;
    try {
      answer = await this.ctx.api(`/api/oauth/consents/${encodeURIComponent(this.id)}`, { method: "POST", body: { allow } });
    } catch (error) {
      if (error.status === 404) return this.failed(error);
      problem.textContent = `Not sent: ${errorText(error)}`;
      for (const button of buttons) button.disabled = false;
      return;
    }
    put(this.box, h("h1", { id: "consent-title" }, allow ? "Allowed" : "Denied"),
      h("p", { role: "status" }, "Returning to the app…"));
    // The app's registered redirect URI (https, or http on a loopback address), never a script address.
    const target = new URL(answer.redirect_to, location.href);
    if (target.protocol === "https:" || target.protocol === "http:") location.assign(target.href);
  }
}
