// What the Agents list and the agent editor both say about an agent.

// The API's slug rule (1-64 of lowercase letters, digits, - and _), for the inputs' pattern.
export const SLUG_PATTERN = "[a-z0-9_\\-]{1,64}";
export const MAX_STARTERS = 6;

const SHARING = { private: "Private", everyone: "Everyone", shared: "Shared" };

// The owner's name, or "the deployment" for the agent without one (`default`).
export function ownerName(agent) {
  return agent.owner ? agent.owner.username : "the deployment";
}

// Its access rule's visibility, as the list shows it (the share dialog explains each).
export function sharingText(agent) {
  return SHARING[agent.access?.visibility] || agent.access?.visibility || "";
}

// The deployment's agent: no owner; nobody deletes it or hands it over.
export function isDefault(agent) {
  return agent.owner === null;
}

// The caller's role (owner, editor or viewer): an owner (or an admin) shares and deletes, an editor saves.
export function roleOf(agent) {
  return agent.access?.role || "viewer";
}
