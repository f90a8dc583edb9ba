// An app's authorization request (#/consent/<id>) met by a visitor who is not signed in: the log-in form
// remembers it in this tab's sessionStorage, so that a sign-in which leaves the dashboard (single sign-on goes
// through the provider and comes back at #/sso, a sign-out through the provider's end-session page comes back
// at /) still ends on the consent. It is forgotten when the consent page opens, and after 10 minutes (a
// consent request's life).
const CONSENT_KEY = "agentsite.consent";
const CONSENT_MS = 10 * 60 * 1000;

export function rememberConsent(id) {
  try {
    sessionStorage.setItem(CONSENT_KEY, JSON.stringify({ id, until: Date.now() + CONSENT_MS }));
  } catch {
    // Storage disabled: a password sign-in still comes back to the consent (the address keeps it).
  }
}

export function pendingConsent() {
  try {
    const value = JSON.parse(sessionStorage.getItem(CONSENT_KEY) || "null");
    return value && typeof value.id === "string" && value.id && value.until > Date.now() ? value.id : null;
  } catch {
    return null;
  }
}

export function forgetConsent() {
  try {
    sessionStorage.removeItem(CONSENT_KEY);
  } catch {
    // Nothing was stored.
  }
}
