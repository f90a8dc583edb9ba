// What the log-in form offers, read from the public GET /api/auth/options before anyone is logged in.

import * as client from "./api.js";

// What the form offers: the public GET /api/auth/options ({registration_open, password_login, sso}), asked each
// time the form is shown (an admin may have opened or closed registration meanwhile). A failed read offers
// the password form alone: the server refuses what it does not allow anyway.
export async function authOptions() {
  try {
    const options = await client.api("/api/auth/options");
    return {
      registration: options?.registration_open === true,
      password: options?.password_login !== false,
      sso: (Array.isArray(options?.sso) ? options.sso : []).filter((item) => item?.name && ownPath(item.login_url)),
    };
  } catch {
    return { registration: false, password: true, sso: [] };
  }
}

// A path on this origin ("/api/auth/oidc/login"), never another site or a javascript: address.
function ownPath(value) {
  return typeof value === "string" && value.startsWith("/") && !value.startsWith("//") && !value.startsWith("/\\");
}
