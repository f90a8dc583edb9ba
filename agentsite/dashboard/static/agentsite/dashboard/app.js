// The dashboard shell: log-in (and registration when it is open), the navigation, a hash router and the
// page-loading contract every page follows.
//
// Routes: #/chat, #/chat/<session_id>, #/agents, #/agents/<id>, #/knowledge, #/scheduler, #/workflows, #/workflows/<id>, #/mcp,
// #/a2a (the remote agents: admins only), #/keys, #/usage, #/groups, #/groups/<id> (admins and the managers of a group only), #/activity (admins only:
// its link is not shown to others, and the route is "Not found" for them), #/settings, #/consent/<id> (where
// GET /oauth/authorize sends the browser; unlinked; consentstore.js keeps it through a sign-in). Logged out: #/sso (where
// single sign-on lands: the tokens are collected) and #/login/password (the password form while password
// sign-in is off, for break-glass users; no link leads there). A page is the module pages/<name>.js exporting `async function mount(root, ctx)`; it renders
// into `root` (the <main> element, emptied before each mount) and may return a cleanup function, called
// before the next page mounts. ctx = {api, stream, user, route, navigate, toast, logout, meta, share}: `user`
// is /api/auth/me's object ({id, username, is_admin, date_joined, groups: [{id, name, role}]}), `route` the hash parts after the page
// name, `navigate(hash)` goes to another route, `toast(message, kind)` shows a passing message ("error"
// ones in a role=alert region, the others in a role=status one), `logout()` logs out, `meta()` resolves to
// GET /api/meta (the server's lists: node types, providers, tool sources, config fields), asked once a log-in,
// and `share({kind, path, label, transfer, onChange})` opens the share dialog (share.js) on a resource's access rule.
// Page CSS: when a page mounts, the shell adds <link rel=stylesheet href="pages/<name>.css"> once (a page
// without one costs a 404 the first time, nothing else). A page whose module cannot be loaded shows a
// "not built yet" placeholder instead of breaking the shell.
import * as client from "./api.js";
import { authOptions } from "./authoptions.js";
import { forgetConsent, pendingConsent, rememberConsent } from "./consentstore.js";
import { openShareDialog } from "./share.js";
import { errorBox, h, loading } from "./ui.js";

const PAGES = [
  ["chat", "Chat"],
  ["agents", "Agents"],
  ["knowledge", "Knowledge"],
  ["scheduler", "Scheduler"],
  ["workflows", "Workflows"],
  ["mcp", "MCP"],
  ["a2a", "A2A", { admin: true }], // the Remote agents page; short, as MCP: an admin's links fit one line at 1280 px
  ["keys", "Keys"],
  ["usage", "Usage"],
  // Groups: admins, and the users who manage at least one group.
  ["groups", "Groups", { when: (user) => user.is_admin || (user.groups || []).some((group) => group.role === "manager") }],
  ["activity", "Activity", { admin: true }],
  ["settings", "Settings"],
  ["consent", "Authorize an app", { hidden: true }], // from GET /oauth/authorize only: not in the navigation
];
const DEFAULT_PAGE = "chat";
const TOAST_MS = { info: 5000, success: 5000, error: 10000 };

const app = document.getElementById("app");
const base = new URL(".", import.meta.url);
const shell = { user: null, main: null, nav: null, cleanup: null, mounting: 0, styles: new Set(), meta: null };

// The server's lists (GET /api/meta), asked once for the pages of one log-in; a failed answer is asked again.
function meta() {
  if (!shell.meta) shell.meta = client.api("/api/meta").catch((error) => { shell.meta = null; throw error; });
  return shell.meta;
}

// --- routing ---

// The pages this user may open: an admin-only page is left out for everyone else, a page with `when` for
// the users it does not answer true for.
function pages() {
  return PAGES.filter(([, , options]) => (!options?.admin || shell.user?.is_admin)
    && (!options?.when || (shell.user && options.when(shell.user))));
}

function parseHash() { // a query after the route (#/mcp?connected=x, where a callback lands) is the page's to read
  const parts = location.hash.replace(/^#\/?/, "").split("?")[0].split("/").filter(Boolean).map(decodeURIComponent);
  const [page = DEFAULT_PAGE, ...route] = parts;
  return { page, route };
}

export function navigate(hash) {
  const target = hash.startsWith("#") ? hash : `#${hash.startsWith("/") ? "" : "/"}${hash}`;
  if (location.hash === target) route();
  else location.hash = target;
}

async function route() {
  if (!shell.user) return;
  refreshApprovals();
  const { page, route: parts } = parseHash();
  if (page === "consent") forgetConsent();
  const ticket = ++shell.mounting;
  await unmount();
  markCurrent(page);
  const main = shell.main;
  main.replaceChildren(loading());
  const known = pages().find(([name]) => name === page);
  if (!known) {
    main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, `There is no page "${page}". `,
      h("a", { href: `#/${DEFAULT_PAGE}` }, "Go to the chat"), "."));
    return;
  }
  document.title = `${known[1]} · agentsite`;
  addPageStyle(page);
  let module;
  try {
    module = await import(new URL(`pages/${page}.js`, base).href);
  } catch (error) {
    if (ticket !== shell.mounting) return;
    main.replaceChildren(h("h1", {}, known[1]), h("p", { class: "placeholder" },
      `The ${known[1]} page is not built yet (or failed to load: ${error.message}).`));
    return;
  }
  if (ticket !== shell.mounting) return;
  main.replaceChildren();
  const share = (options) => openShareDialog({ ...options, user: shell.user, toast, meta });
  const ctx = { api: client.api, stream: client.stream, user: shell.user, route: parts, navigate, toast, logout: client.logout, meta,
    share };
  try {
    const cleanup = await module.mount(main, ctx);
    if (ticket !== shell.mounting) {
      if (typeof cleanup === "function") cleanup();
      return;
    }
    shell.cleanup = typeof cleanup === "function" ? cleanup : null;
    // After a navigation, keyboard and screen-reader users start at the new page, not on the old link.
    const active = document.activeElement;
    if (!active || active === document.body || shell.nav?.contains(active)) main.focus({ preventScroll: true });
  } catch (error) {
    if (ticket !== shell.mounting) return;
    console.error(error);
    main.replaceChildren(h("h1", {}, known[1]), errorBox(`This page failed: ${error.message}`, () => route()));
  }
}

async function unmount() {
  const cleanup = shell.cleanup;
  shell.cleanup = null;
  if (!cleanup) return;
  try {
    await cleanup();
  } catch (error) {
    console.error(error);
  }
}

function markCurrent(page) {
  for (const link of shell.nav?.querySelectorAll("a[data-page]") || []) {
    if (link.dataset.page === page) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function addPageStyle(page) {
  if (shell.styles.has(page)) return;
  shell.styles.add(page);
  const link = h("link", { rel: "stylesheet", href: new URL(`pages/${page}.css`, base).href });
  link.addEventListener("error", () => link.remove());
  document.head.append(link);
}

// --- the pending approvals' count on the Workflows link ---

// GET /api/approvals lists the approvals the user may decide; its count shows on the Workflows link. Asked
// at each navigation, every minute, and when a page says approvals changed (the `agentsite:approvals` event).
async function refreshApprovals() {
  const link = shell.nav?.querySelector('a[data-page="workflows"]');
  if (!link) return;
  let count = 0;
  try {
    count = (await client.api("/api/approvals?limit=1")).count;
  } catch {
    return;
  }
  link.querySelector(".nav-count")?.remove();
  if (count > 0) {
    link.append(h("span", { class: "nav-count", "data-approvals": String(count),
      "aria-label": `${count} pending approval${count === 1 ? "" : "s"}` }, String(count)));
  }
}
window.addEventListener("agentsite:approvals", () => refreshApprovals());
setInterval(() => { if (shell.user) refreshApprovals(); }, 60000);

// --- messages ---

const toasts = {
  status: h("div", { class: "toasts", role: "status", "aria-live": "polite" }),
  alert: h("div", { class: "toasts", role: "alert", "aria-live": "assertive" }),
};

export function toast(message, kind = "info") {
  const region = kind === "error" ? toasts.alert : toasts.status;
  const close = h("button", { type: "button", class: "toast-close", "aria-label": "Dismiss" }, "×");
  const item = h("div", { class: `toast toast-${kind}` }, h("span", {}, String(message)), close);
  const remove = () => item.remove();
  close.addEventListener("click", remove);
  region.append(item);
  setTimeout(remove, TOAST_MS[kind] ?? TOAST_MS.info);
}

// --- the logged-in shell ---

function renderShell() {
  shell.nav = h("nav", { class: "nav", "aria-label": "Main" },
    h("ul", {}, pages().filter(([, , options]) => !options?.hidden)
      .map(([name, label]) => h("li", {}, h("a", { href: `#/${name}`, "data-page": name }, label)))));
  // A long name is cut with an ellipsis; the title holds all of it.
  const who = h("span", { class: "who", title: shell.user.username }, shell.user.username);
  const header = h("header", { class: "topbar" },
    h("a", { class: "brand", href: `#/${DEFAULT_PAGE}` }, "agentsite"),
    shell.nav,
    h("div", { class: "account" }, who, shell.user.is_admin ? h("span", { class: "badge" }, "admin") : null,
      h("button", { type: "button", onclick: () => client.logout() }, "Log out")));
  shell.main = h("main", { id: "main", tabindex: "-1" });
  app.replaceChildren(header, shell.main, toasts.status, toasts.alert);
}

async function start() {
  app.replaceChildren(loading("Loading the dashboard…"), toasts.status, toasts.alert);
  if (parseHash().page === "sso") return collectSso();
  if (!client.isLoggedIn()) return showLogin(null, loginMode());
  try {
    shell.user = await client.api("/api/auth/me");
    client.setUser(shell.user);
  } catch (error) {
    if (error.status === 401) return showLogin("Your session has expired: log in again.");
    app.replaceChildren(errorBox(`The server could not be reached: ${error.message}`, start), toasts.status, toasts.alert);
    return;
  }
  enter();
}

// The routes of the logged-out dashboard, which never reach route(): #/sso, where the provider's sign-in ends,
// and #/login/password, the password form for break-glass users while password sign-in is off.
const OUTSIDE = new Set(["sso", "login"]);

function enter() {
  renderShell();
  if (!location.hash || location.hash === "#" || location.hash === "#/" || OUTSIDE.has(parseHash().page)) {
    const consent = pendingConsent();
    history.replaceState(null, "", consent ? `#/consent/${encodeURIComponent(consent)}` : `#/${DEFAULT_PAGE}`);
  }
  route();
}

// After the provider's sign-in the callback sends the browser to /#/sso with a single-use ticket cookie:
// trade it for the tokens, then go on to the chat. The ticket is gone after one try either way.
async function collectSso() {
  app.replaceChildren(loading("Finishing the sign-in…"), toasts.status, toasts.alert);
  try {
    shell.user = await client.ssoSession();
  } catch (error) {
    if (error.status === 0) {
      app.replaceChildren(h("main", { id: "main", class: "login-page" }, h("div", { class: "login card" },
        h("h1", {}, "Finishing the sign-in"),
        errorBox(`The sign-in could not be finished: ${error.message}`, collectSso))), toasts.status, toasts.alert);
      return;
    }
    if (error.status === 401 && client.isLoggedIn()) {
      // Nothing to collect (a link to #/sso from anywhere): whoever is signed in stays signed in.
      history.replaceState(null, "", "#/");
      return start();
    }
    // A sign-in that failed replaces whoever was signed in in this tab: nobody is, now.
    client.forget("sso_failed");
    shell.user = null;
    history.replaceState(null, "", "#/");
    return showLogin(null, "login", error.status === 401 ? "The sign-in expired or was already used; sign in again."
      : `The sign-in could not be finished: ${error.message}`);
  }
  // The session's answer has no groups: /api/auth/me adds them (which pages to offer).
  shell.user = await client.api("/api/auth/me").catch(() => shell.user);
  client.setUser(shell.user);
  enter();
}

// Logging out (the button, ctx.logout, or an expired session) ends here: the log-in form comes back.
client.onLogout((reason) => {
  const had = Boolean(shell.user);
  ++shell.mounting;
  unmount();
  shell.user = null;
  shell.meta = null;
  if (had || reason === "expired") {
    showLogin(reason === "expired" ? "Your session has expired: log in again." : "You are logged out.");
  }
});

// --- log in / register ---

// The log-in form's mode from the address: #/login/password is the password form whatever the options say
// (#/login, or any other address, the form the options call for).
function loginMode() {
  const { page, route: parts } = parseHash();
  return page === "login" && parts[0] === "password" ? "password" : "login";
}

let loginShown = 0;

// mode: "login" (the form the options call for: the password form and the single sign-on buttons, or the
// buttons alone while password sign-in is off), "password" (#/login/password: the password form even while it
// is off, for break-glass users) or "register". notice: a passing word (role=status); failure: what went wrong
// before the form was shown (role=alert).
// known: the options the form on screen was drawn with, when the form itself switches between log-in and
// registration: the other form is drawn at once, so nothing typed meanwhile lands in the one going away.
async function showLogin(notice, mode = "login", failure = null, known = null) {
  const shown = ++loginShown;
  if (!known) {
    // Nothing of a signed-in shell stays on screen while the options are asked.
    if (!app.querySelector(".login-page")) app.replaceChildren(loading(), toasts.status, toasts.alert);
  }
  const options = known ?? (await authOptions());
  if (shown !== loginShown || shell.user) return;
  const registering = mode === "register";
  const { page: wanted, route: wantedParts } = parseHash();
  if (wanted === "consent" && wantedParts[0]) {
    rememberConsent(wantedParts[0]);
    notice = `${notice ? `${notice} ` : ""}An app asks to use your account: sign in to review its request.`;
  }
  const withPassword = registering || mode === "password" || options.password;
  document.title = registering ? "Create an account · agentsite" : "Log in · agentsite";
  const problem = h("div", { class: "form-error", role: "alert" });
  const switcher = h("p", { class: "switch" });
  const sso = registering ? [] : options.sso.map((item) =>
    h("a", { class: "button primary sso-button", href: item.login_url }, item.name));
  const title = h("h1", { id: "login-title" }, registering ? "Create an account" : "Log in to agentsite");
  const status = [notice ? h("p", { class: "notice", role: "status" }, notice) : null,
    failure ? h("p", { class: "form-error", role: "alert" }, failure) : null];
  if (!withPassword) {
    const card = h("section", { class: "login card", "aria-labelledby": "login-title" }, title, status,
      sso.length ? [h("p", { class: "hint" }, "Sign in with your organisation's account."),
        h("div", { class: "sso-buttons" }, sso)]
        : h("p", { class: "form-error" }, "Password sign-in is turned off and no single sign-on is set up: ask the "
          + "server's administrator."));
    app.replaceChildren(h("main", { id: "main", class: "login-page" }, card), toasts.status, toasts.alert);
    sso[0]?.focus();
    return;
  }
  const username = h("input", { id: "login-username", name: "username", autocomplete: "username", required: true,
    autocapitalize: "none", spellcheck: "false", maxlength: "150" });
  const password = h("input", { id: "login-password", name: "password", type: "password", required: true,
    autocomplete: registering ? "new-password" : "current-password" });
  const submit = h("button", { type: "submit", class: "primary" }, registering ? "Create account" : "Log in");
  // While password sign-in is off, #/login/password says who it is for.
  const breakGlass = mode === "password" && !options.password
    ? h("p", { class: "hint" }, "Password sign-in is turned off on this server: only its break-glass "
      + "administrators log in here.") : null;
  // The providers' buttons come first, "or" the password form (the break-glass form has a link back instead).
  const buttons = sso.length && !breakGlass
    ? [h("div", { class: "sso-buttons" }, sso), h("p", { class: "divider", "aria-hidden": "true" }, h("span", {}, "or"))]
    : null;
  const form = h("form", { class: "login card", "aria-labelledby": "login-title", novalidate: true },
    title, status, breakGlass, buttons,
    h("div", { class: "field" }, h("label", { for: username.id }, "Username"), username),
    h("div", { class: "field" }, h("label", { for: password.id }, "Password"), password),
    problem, submit, switcher);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    problem.replaceChildren();
    if (!username.value.trim() || !password.value) {
      problem.textContent = "Enter a username and a password.";
      (username.value.trim() ? password : username).focus();
      return;
    }
    submit.disabled = true;
    submit.setAttribute("aria-busy", "true");
    try {
      const login = registering ? client.register : client.login;
      shell.user = await login(username.value.trim(), password.value);
      // The log-in answer's user has no groups: /api/auth/me adds them (which pages to offer).
      shell.user = await client.api("/api/auth/me").catch(() => shell.user);
      client.setUser(shell.user);
      enter();
    } catch (error) {
      problem.textContent = loginProblem(error);
      password.focus();
    } finally {
      submit.disabled = false;
      submit.removeAttribute("aria-busy");
    }
  });
  app.replaceChildren(h("main", { id: "main", class: "login-page" }, form), toasts.status, toasts.alert);
  username.focus();
  if (registering) {
    switcher.append("Already have an account? ",
      h("button", { type: "button", class: "link", onclick: () => showLogin(null, "login", null, options) },
        "Log in instead"));
  } else if (breakGlass) {
    if (sso.length) switcher.append(h("a", { href: "#/login" }, "Sign in with single sign-on instead"));
  } else if (options.registration) {
    switcher.append("No account yet? ",
      h("button", { type: "button", class: "link", onclick: () => showLogin(null, "register", null, options) },
        "Create an account"));
  }
}

function loginProblem(error) {
  const fields = error.details && typeof error.details === "object" ? Object.values(error.details).flat() : [];
  if (error.status === 400 && fields.length) return fields.join(" ");
  return error.message;
}

// While nobody is logged in, the address picks the log-in form (#/login/password or not) or collects a sign-in
// (#/sso). Another change of the address (the skip link's #main) leaves the form as it is.
window.addEventListener("hashchange", () => {
  if (shell.user) return route();
  const { page } = parseHash();
  if (page === "sso") collectSso();
  else if (page === "login" || page === "consent") showLogin(null, loginMode());
});
start();
