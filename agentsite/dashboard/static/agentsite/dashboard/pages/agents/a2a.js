// An agent as an A2A server (docs/api.md, A2A, every agent a server): its endpoint, <origin>/a2a/<slug>, to copy,
// and its agent card, asked with the user's own token when Card is pressed (the card answers to whoever may use
// the agent) and shown as a summary (name, version, endpoint, streaming, skills, how callers authenticate) with
// the raw JSON below it.
import { copyField, errorBox, errorText, h, loading, put } from "../../ui.js";

// A card's security scheme, in either dialect: A2A 1.0 wraps it ({httpAuthSecurityScheme: {...}}), 0.3 does not.
const SCHEME_KINDS = { httpAuthSecurityScheme: "HTTP", apiKeySecurityScheme: "API key", oauth2SecurityScheme: "OAuth 2",
  openIdConnectSecurityScheme: "OpenID Connect", mtlsSecurityScheme: "Mutual TLS" };

export function a2aUrl(agent) {
  return `${location.origin}/a2a/${encodeURIComponent(agent.slug)}`;
}

// The panel of one agent in the list: the URL with Copy, and Card, which opens (and closes) the card below.
export function a2aPanel(agent, ctx) {
  const url = a2aUrl(agent);
  const copy = copyField(url, `A2A URL of ${agent.name}`, { buttonLabel: `Copy the A2A URL of ${agent.name}`, primary: false });
  const box = h("div", { class: "agents-a2a-card", id: `agent-a2a-card-${agent.id}`, hidden: true });
  const toggle = h("button", { type: "button", "aria-expanded": "false", "aria-controls": box.id,
    "aria-label": `A2A card of ${agent.name}`, onclick: () => {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      box.hidden = !open;
      if (open && !box.dataset.loaded) loadCard(agent, ctx, box);
    } }, "Card");
  return h("div", { class: "agents-a2a", dataset: { a2a: agent.slug } },
    h("div", { class: "agents-a2a-row" }, h("span", { class: "agents-a2a-label", "aria-hidden": "true" }, "A2A"),
      copy.input, copy.button, toggle),
    copy.status, box);
}

async function loadCard(agent, ctx, box) {
  put(box, loading("Loading the agent card…"));
  let card;
  try {
    card = await ctx.api(`/a2a/${encodeURIComponent(agent.slug)}/.well-known/agent-card.json`);
  } catch (error) {
    put(box, errorBox(`The card could not be loaded: ${errorText(error)}`, () => loadCard(agent, ctx, box)));
    return;
  }
  box.dataset.loaded = "true";
  put(box, cardView(card));
}

// The summary a person reads, then the card itself.
export function cardView(card) {
  const endpoint = (card.supportedInterfaces || [])[0];
  const rows = [
    ["Name", card.name],
    ["Version", card.version],
    ["Description", card.description],
    ["Endpoint", endpoint ? [h("code", {}, endpoint.url), ` (${[endpoint.protocolBinding, endpoint.protocolVersion]
      .filter(Boolean).join(" ")})`] : card.url ? h("code", {}, card.url) : null],
    ["Streaming", card.capabilities?.streaming ? "Yes" : "No"],
    ["Authentication", schemes(card.securitySchemes)],
  ].filter(([, value]) => value !== undefined && value !== null && value !== "");
  return [
    h("dl", { class: "agents-a2a-facts" }, rows.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)])),
    h("h4", {}, "Skills"),
    (card.skills || []).length ? h("ul", { class: "agents-a2a-skills" }, card.skills.map((skill) => h("li", {},
      h("strong", {}, skill.name || skill.id), skill.description ? ` — ${skill.description}` : null,
      (skill.examples || []).length ? h("ul", { class: "agents-a2a-examples", "aria-label": "Examples" },
        skill.examples.map((example) => h("li", {}, example))) : null)))
      : h("p", { class: "muted" }, "No skills listed."),
    h("details", { class: "agents-a2a-raw" }, h("summary", {}, "The card as JSON"),
      h("pre", {}, JSON.stringify(card, null, 2))),
  ];
}

function schemes(found) {
  const entries = Object.entries(found || {});
  if (!entries.length) return "None named";
  return h("ul", { class: "agents-a2a-schemes" }, entries.map(([name, scheme]) => {
    const [kind, inner] = Object.entries(scheme || {}).find(([key]) => SCHEME_KINDS[key]) || [scheme?.type, scheme];
    return h("li", { dataset: { scheme: name } }, h("strong", {}, name), ` (${SCHEME_KINDS[kind] || kind || "?"})`,
      inner?.description ? `: ${inner.description}` : null);
  }));
}
