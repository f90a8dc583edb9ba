// The OpenID provider the sign-in tests run on loopback: npm's certified `oidc-provider` (8.8.1, the last
// release for Node 20) with its development log-in page, PKCE S256 required, RP-initiated logout, and a small
// control API for the tests (never part of a real provider):
//
//   PUT  /__test/accounts/<id>  {claims}  the claims of the account that logs in as <id> (any password);
//                                         an account never PUT logs in with {sub: <id>, preferred_username: <id>}
//   PUT  /__test/mode  {mode}             how the next token responses' ID tokens misbehave (null: they do not):
//        tamper, wrong_aud, wrong_iss, expired, future_iat, no_nonce, wrong_nonce, new_key (signed with a key
//        first published now: a rotation; each PUT of new_key makes another key, so that every rotation is
//        news to a relying party that kept the key set), unpublished_key (signed with a key id the key set never
//        holds), hs256 (signed with the client secret), none_alg
//   GET  /__test/log                      the requests the provider saw on /session/end and /token
//
// Clients: `agentsite` (ID tokens RS256) and `agentsite-es` (ES256), secret CLIENT_SECRET; every redirect URI
// on 127.0.0.1 or localhost is allowed (the servers' ports are picked at run time). Consent is implied for
// both (first-party clients), so a sign-in is the log-in form alone. On start it prints one JSON line,
// {"issuer": "http://127.0.0.1:<port>"}.
//
// Usage: node provider.mjs <port> [fd]   (fd: an inherited socket already listening on 127.0.0.1:<port>)

import { SignJWT, decodeProtectedHeader, exportJWK, generateKeyPair, importJWK } from "jose";
import Provider from "oidc-provider";

const CLIENT_SECRET = "test-client-secret-0123456789abcdef0123456789";
const port = Number(process.argv[2]);
const fd = process.argv[3] === undefined ? null : Number(process.argv[3]);
if (!port) throw new Error("usage: node provider.mjs <port> [fd]");

async function keyPair(alg, kid) {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  const priv = { ...(await exportJWK(privateKey)), kid, alg, use: "sig" };
  const pub = { ...(await exportJWK(publicKey)), kid, alg, use: "sig" };
  return { priv, pub, key: privateKey };
}

const rsa = await keyPair("RS256", "rsa-1");
const ec = await keyPair("ES256", "ec-1");
let rotations = 0;
let rotated = await keyPair("RS256", "rsa-rotated-0");
const published = []; // the rotated keys' public halves, each added to /jwks when a token first used it
const unpublished = await keyPair("RS256", "rsa-never-published");
let mode = null;
const accounts = new Map();
const log = [];

function loopback(uri) {
  try {
    const url = new URL(uri);
    return url.protocol === "http:" && ["127.0.0.1", "localhost"].includes(url.hostname);
  } catch {
    return false;
  }
}

const SCOPE_CLAIMS = {
  openid: ["sub"],
  profile: ["name", "given_name", "family_name", "preferred_username", "nickname"],
  email: ["email", "email_verified"],
  groups: ["groups"],
  roles: ["realm_access"],
};

const configuration = {
  clients: [
    { client_id: "agentsite", client_secret: CLIENT_SECRET, redirect_uris: ["http://127.0.0.1/api/auth/oidc/callback"],
      post_logout_redirect_uris: ["http://127.0.0.1/"], id_token_signed_response_alg: "RS256" },
    { client_id: "agentsite-es", client_secret: CLIENT_SECRET,
      redirect_uris: ["http://127.0.0.1/api/auth/oidc/callback"], post_logout_redirect_uris: ["http://127.0.0.1/"],
      id_token_signed_response_alg: "ES256" },
  ],
  jwks: { keys: [rsa.priv, ec.priv] },
  pkce: { required: () => true, methods: ["S256"] },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  scopes: Object.keys(SCOPE_CLAIMS),
  claims: SCOPE_CLAIMS,
  // Every claim of the granted scopes in the ID token too (the relying party reads both).
  conformIdTokenClaims: false,
  cookies: { keys: ["agentsite-test-provider-cookie-key"] },
  ttl: { AccessToken: 3600, AuthorizationCode: 60, IdToken: 3600, Session: 3600, Grant: 3600, Interaction: 600 },
  findAccount: async (ctx, id) => ({
    accountId: id,
    async claims() {
      return { preferred_username: id, ...(accounts.get(id) || {}), sub: id };
    },
  }),
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope(Object.keys(SCOPE_CLAIMS).join(" "));
    await grant.save();
    return grant;
  },
  renderError(ctx, out) {
    ctx.type = "html";
    ctx.body = `<!doctype html><title>provider error</title><h1 id="error">${out.error}</h1><p>${out.error_description || ""}</p>`;
  },
};

function b64json(part) {
  return JSON.parse(Buffer.from(part, "base64url").toString());
}

async function misbehave(idToken, clientSecret) {
  const [head, body, signature] = idToken.split(".");
  const header = decodeProtectedHeader(idToken);
  const claims = b64json(body);
  const now = Math.floor(Date.now() / 1000);
  const signer = header.alg === "ES256" ? ec : rsa;
  const resign = async (changed, with_ = signer, alg = header.alg) =>
    new SignJWT(changed).setProtectedHeader({ alg, kid: with_.priv.kid, typ: "JWT" }).sign(with_.key);
  switch (mode) {
    case "tamper": {
      const changed = Buffer.from(JSON.stringify({ ...claims, sub: `${claims.sub}-x` })).toString("base64url");
      return `${head}.${changed}.${signature}`;
    }
    case "wrong_aud":
      return resign({ ...claims, aud: "someone-else", azp: undefined });
    case "wrong_iss":
      return resign({ ...claims, iss: "https://issuer.example" });
    case "expired":
      return resign({ ...claims, iat: now - 7200, exp: now - 3600 });
    case "future_iat":
      return resign({ ...claims, iat: now + 3600, exp: now + 7200 });
    case "no_nonce": {
      const { nonce, ...rest } = claims;
      return resign(rest);
    }
    case "wrong_nonce":
      return resign({ ...claims, nonce: "not-the-nonce" });
    case "new_key":
      if (!published.includes(rotated.pub)) published.push(rotated.pub);
      return resign(claims, rotated, "RS256");
    case "unpublished_key":
      return resign(claims, unpublished, "RS256");
    case "hs256": {
      const secret = await importJWK({ kty: "oct", k: Buffer.from(clientSecret).toString("base64url") }, "HS256");
      return new SignJWT(claims).setProtectedHeader({ alg: "HS256", typ: "JWT" }).sign(secret);
    }
    case "none_alg": {
      const none = Buffer.from(JSON.stringify({ alg: "none", typ: "JWT" })).toString("base64url");
      return `${none}.${body}.`;
    }
    default:
      return idToken;
  }
}

async function readJson(ctx) {
  const chunks = [];
  for await (const chunk of ctx.req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString() || "null";
  return JSON.parse(text);
}

const provider = new Provider(`http://127.0.0.1:${port}`, configuration);
// Loopback redirect URIs on any port (oidc-provider's documented recipe for development clients).
provider.Client.prototype.redirectUriAllowed = function redirectUriAllowed(uri) {
  return loopback(uri) && new URL(uri).pathname === "/api/auth/oidc/callback";
};
provider.Client.prototype.postLogoutRedirectUriAllowed = function postLogoutAllowed(uri) {
  return loopback(uri);
};

provider.use(async (ctx, next) => {
  if (ctx.path.startsWith("/__test/")) {
    if (ctx.method === "PUT" && ctx.path.startsWith("/__test/accounts/")) {
      accounts.set(decodeURIComponent(ctx.path.slice("/__test/accounts/".length)), (await readJson(ctx)) || {});
      ctx.status = 204;
    } else if (ctx.method === "PUT" && ctx.path === "/__test/mode") {
      mode = ((await readJson(ctx)) || {}).mode || null;
      if (mode === "new_key") {
        rotations += 1;
        rotated = await keyPair("RS256", `rsa-rotated-${rotations}`);
      }
      ctx.status = 204;
    } else if (ctx.method === "GET" && ctx.path === "/__test/log") {
      ctx.body = log;
    } else {
      ctx.status = 404;
    }
    return;
  }
  if (ctx.path === "/session/end" || ctx.path === "/token") {
    log.push({ path: ctx.path, method: ctx.method, query: { ...ctx.query } });
  }
  await next();
  if (ctx.path === "/token" && ctx.status === 200 && mode && ctx.body?.id_token) {
    ctx.body = { ...ctx.body, id_token: await misbehave(ctx.body.id_token, CLIENT_SECRET) };
  }
  if (ctx.path === "/jwks" && published.length && ctx.body?.keys) {
    ctx.body = { keys: [...ctx.body.keys, ...published] };
  }
});

// The harness holds the listening socket and passes it as a file descriptor (tests/oidc/harness.py), so the port
// cannot be lost between picking it and listening.
const onListening = () => {
  process.stdout.write(`${JSON.stringify({ issuer: `http://127.0.0.1:${port}` })}\n`);
};
if (fd) provider.listen({ fd }, onListening);
else provider.listen(port, "127.0.0.1", onListening);
