// The dashboard's only door to the server: the public /api, with the bearer token.
//
// Tokens live in this module's memory and in sessionStorage (so a reload of the tab keeps the user logged
// in, and closing the tab forgets them); never in a cookie or a URL. A 401 refreshes the access token once
// with the refresh token (one refresh shared by every call that hit the 401) and retries; when that fails,
// the tokens are dropped and the shell's logout handler shows the log-in form again.
//
// A single sign-on session (collected by ssoSession() after the provider sent the browser back) is stored with
// `sso: true`: its log-out also ends the provider's session (logout()).

const STORAGE_KEY = "agentsite.auth";
// Calls whose 401 means "wrong credentials", never "token expired": they are not refreshed and retried.
const NO_REFRESH = ["/api/auth/login", "/api/auth/register", "/api/auth/refresh", "/api/auth/oidc/session"];

export class ApiError extends Error {
  constructor(status, code, message, details = {}) {
    super(message || "The request failed.");
    this.name = "ApiError";
    this.status = status;
    this.code = code || "error";
    this.details = details || {};
  }
}

let auth = readStored();
let refreshing = null;
const logoutHandlers = new Set();

function readStored() {
  try {
    const value = JSON.parse(sessionStorage.getItem(STORAGE_KEY) || "null");
    return value && typeof value.token === "string" ? value : null;
  } catch {
    return null;
  }
}

function store(value) {
  auth = value;
  try {
    if (value) sessionStorage.setItem(STORAGE_KEY, JSON.stringify(value));
    else sessionStorage.removeItem(STORAGE_KEY);
  } catch {
    // Storage may be disabled (private mode, quota): the tokens then live in memory for this page only.
  }
}

export function session() {
  return auth ? { ...auth } : null;
}

export function isLoggedIn() {
  return Boolean(auth?.token);
}

// Keep the tokens (and the user) from a login, register, refresh or change-password answer. `sso`: whether the
// session came from single sign-on (a refresh or a password change keeps what the session was).
export function setTokens({ token, refresh, user, sso }) {
  store({ token, refresh: refresh ?? auth?.refresh ?? null, user: user ?? auth?.user ?? null,
    sso: sso ?? auth?.sso ?? false });
}

export function setUser(user) {
  if (auth) store({ ...auth, user });
}

// Called (with a reason) whenever the tokens are dropped: logout, or a refresh that failed.
export function onLogout(handler) {
  logoutHandlers.add(handler);
  return () => logoutHandlers.delete(handler);
}

export function forget(reason = "logout") {
  const had = Boolean(auth);
  store(null);
  if (had) for (const handler of logoutHandlers) handler(reason);
}

export async function login(username, password) {
  const answer = await api("/api/auth/login", { method: "POST", body: { username, password } });
  setTokens({ ...answer, sso: false });
  return answer.user;
}

export async function register(username, password) {
  const answer = await api("/api/auth/register", { method: "POST", body: { username, password } });
  setTokens({ ...answer, sso: false });
  return answer.user;
}

// Collect a finished single sign-on: the callback left a single-use HttpOnly ticket cookie that only
// POST /api/auth/oidc/session receives; its answer is a token pair like the log-in's. A 401 (no ticket, or one
// used or expired) rejects with the ApiError.
export async function ssoSession() {
  const answer = await api("/api/auth/oidc/session", { method: "POST" });
  setTokens({ ...answer, sso: true });
  return answer.user;
}

// Blacklist the refresh token on the server (best effort), then forget both tokens. A single sign-on session
// asks POST /api/auth/oidc/logout instead, and then sends the browser to the provider's end-session URL when
// there is one (the provider ends its own session and sends the browser back to /).
export async function logout() {
  const sso = Boolean(auth?.sso);
  let endSession = null;
  try {
    const answer = await revoke(sso ? "/api/auth/oidc/logout" : "/api/auth/logout");
    if (sso) endSession = providerUrl(answer?.end_session_url);
  } catch {
    // Logging out must always work locally, even when the server is gone or the token already expired.
  }
  forget("logout");
  if (endSession) location.assign(endSession);
}

async function revoke(path) {
  const refresh = auth?.refresh;
  if (!refresh) return null;
  try {
    return await api(path, { method: "POST", body: { refresh } });
  } catch (error) {
    // An expired access token was refreshed on the way, which rotated (and blacklisted) the refresh token
    // the body named: name the new one.
    if (auth?.refresh && auth.refresh !== refresh) return api(path, { method: "POST", body: { refresh: auth.refresh } });
    throw error;
  }
}

// The provider's end-session URL when it is a web address (never a javascript: or data: one).
function providerUrl(value) {
  if (typeof value !== "string" || !value) return null;
  try {
    const url = new URL(value, location.href);
    return url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
  } catch {
    return null;
  }
}

function requestInit({ method = "GET", body, signal, headers = {} }) {
  const init = { method, signal, headers: { Accept: "application/json", ...headers }, credentials: "same-origin" };
  if (auth?.token) init.headers.Authorization = `Bearer ${auth.token}`;
  if (body instanceof FormData || body instanceof Blob) {
    init.body = body; // the browser sets the multipart boundary (or the blob's type) itself
  } else if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  return init;
}

async function send(path, options) {
  try {
    return await fetch(path, requestInit(options));
  } catch (error) {
    if (error?.name === "AbortError") throw error;
    throw new ApiError(0, "network_error", "The server cannot be reached. Check the connection and try again.");
  }
}

// The error envelope {error: {code, message, details}} as an ApiError (or a plain one for other bodies).
export async function errorFrom(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  const error = body?.error;
  if (error && typeof error === "object") {
    return new ApiError(response.status, error.code, error.message, error.details);
  }
  return new ApiError(response.status, `http_${response.status}`, `The server answered ${response.status} ${response.statusText}.`);
}

async function refreshTokens() {
  const refresh = auth?.refresh;
  if (!refresh) return false;
  refreshing ??= (async () => {
    try {
      const response = await fetch("/api/auth/refresh", {
        method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ refresh }),
      });
      if (!response.ok) return false;
      setTokens(await response.json());
      return true;
    } catch {
      return false;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

// One call, refreshed and retried once on a 401; the Response when it is 2xx, else an ApiError.
async function authorised(path, options) {
  const token = auth?.token;
  let response = await send(path, options);
  if (response.status === 401 && token && !NO_REFRESH.includes(path)) {
    // Another call may have refreshed meanwhile: retry with its token before refreshing again.
    const renewed = auth?.token && auth.token !== token ? true : await refreshTokens();
    if (!renewed) {
      const error = await errorFrom(response);
      forget("expired");
      throw error;
    }
    response = await send(path, options);
    if (response.status === 401) {
      const error = await errorFrom(response);
      forget("expired");
      throw error;
    }
  }
  if (!response.ok) throw await errorFrom(response);
  return response;
}

// GET/POST/... a JSON API path. body: a value sent as JSON, or FormData sent as multipart.
// Answers the parsed JSON (null for 204), or the Response itself with raw: true.
export async function api(path, { method = "GET", body, signal, raw = false, headers } = {}) {
  const response = await authorised(path, { method, body, signal, headers });
  if (raw) return response;
  if (response.status === 204) return null;
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(response.status, "bad_response", "The server's answer was not JSON.");
  }
}

// Every page of a paginated list (docs/api.md: {count, next, results}), up to `max` items.
export async function listAll(path, { signal, max = 1000 } = {}) {
  const items = [];
  let next = path;
  while (next && items.length < max) {
    const page = await api(next, { signal });
    if (Array.isArray(page)) return page;
    items.push(...(page.results || []));
    next = page.next ? sameOriginPath(page.next) : null;
  }
  return items;
}

// A user named by id or by username, as {id, username} (username null when given an id). Digits are an id.
// A name is looked up in GET /api/users (admins only: no other user lookup exists, so anyone else gives an id).
export async function findUser(text, { admin = false } = {}) {
  const value = String(text ?? "").trim();
  if (/^\d{1,18}$/.test(value)) return { id: Number(value), username: null };
  if (!value) throw new ApiError(400, "invalid", "Give a user's id or username.");
  if (!admin) throw new ApiError(400, "invalid", "Give the user's numeric id (only administrators can look users up by name).");
  const users = await listAll(`/api/users?search=${encodeURIComponent(value)}&limit=100`, { max: 500 });
  const user = users.find((item) => item.username === value)
    || users.find((item) => item.username.toLowerCase() === value.toLowerCase());
  if (!user) throw new ApiError(404, "not_found", `No user named ${value}.`);
  return { id: Number(user.id), username: user.username }; // this list answers ids as strings
}

function sameOriginPath(url) {
  const parsed = new URL(url, location.href);
  return parsed.origin === location.origin ? parsed.pathname + parsed.search : null;
}

// POST `body` and read the text/event-stream answer from fetch's body, calling onEvent({event, data}) for
// each event (data parsed as JSON when it is JSON). Resolves when the stream ends; rejects with an ApiError
// when the request is refused or the connection breaks, or with the AbortError when `signal` aborts.
// An `error` event is the stream's own last word: it reaches onEvent like any other.
export async function stream(path, { body, signal, onEvent = () => {}, method = "POST" } = {}) {
  const response = await authorised(path, { method, body, signal, headers: { Accept: "text/event-stream" } });
  if (!response.body) throw new ApiError(response.status, "bad_response", "The server sent no stream.");
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (error) {
        if (error?.name === "AbortError" || signal?.aborted) throw error;
        throw new ApiError(0, "stream_broken", "The connection broke before the reply was finished.");
      }
      if (chunk.done) break;
      buffer += chunk.value.replace(/\r\n?/g, "\n");
      for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const parsed = parseEvent(block);
        if (parsed) onEvent(parsed);
      }
    }
    const last = parseEvent(buffer);
    if (last) onEvent(last);
  } finally {
    reader.releaseLock?.();
  }
}

function parseEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue; // comments are keep-alives
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  const text = data.join("\n");
  try {
    return { event, data: JSON.parse(text) };
  } catch {
    return { event, data: text };
  }
}
