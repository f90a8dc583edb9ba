// What was being written in the composer, kept per user and per chat in localStorage, so that a reload (or
// coming back to a chat) finds it again. A chat not created yet has a draft of its own ("new").
//
// Bounded: at most MAX_DRAFTS drafts in the browser (every user's together), none older than MAX_AGE_DAYS;
// the oldest go when a new one is started. Storage that is disabled or full keeps no draft and says nothing:
// a draft is a convenience, never a reason for the page to fail.
const DRAFT_PREFIX = "agentsite.draft.";
const MAX_DRAFTS = 50;
const MAX_AGE_DAYS = 30;
const NEW_CHAT = "new";

export class Drafts {
  // user: the signed-in user (ctx.user); drafts are keyed by its id, so another user of the browser never
  // sees them.
  constructor(user) {
    this.owner = String(user?.id ?? user?.username ?? "");
  }

  key(sessionId) {
    return `${DRAFT_PREFIX}${encodeURIComponent(this.owner)}.${sessionId || NEW_CHAT}`;
  }

  // The draft of a chat (null: a chat not created yet), or "".
  read(sessionId) {
    try {
      const draft = JSON.parse(localStorage.getItem(this.key(sessionId)) || "null");
      return typeof draft?.text === "string" ? draft.text : "";
    } catch {
      return "";
    }
  }

  // Keeps the text as the chat's draft; an empty text forgets it.
  write(sessionId, text) {
    if (!text) return this.remove(sessionId);
    const key = this.key(sessionId);
    try {
      const started = localStorage.getItem(key) === null;
      localStorage.setItem(key, JSON.stringify({ text, at: Date.now() }));
      if (started) this.prune();
    } catch {
      // Disabled or full: no draft this time.
    }
  }

  remove(sessionId) {
    try {
      localStorage.removeItem(this.key(sessionId));
    } catch {
      // Disabled storage holds nothing to remove.
    }
  }

  // Drops the drafts past the age limit, then the oldest beyond the count limit.
  prune() {
    const drafts = [];
    for (let index = 0; index < localStorage.length; index++) {
      const key = localStorage.key(index);
      if (!key?.startsWith(DRAFT_PREFIX)) continue;
      let at = 0;
      try {
        at = Number(JSON.parse(localStorage.getItem(key))?.at) || 0;
      } catch {
        // Not ours to read: it goes as the oldest.
      }
      drafts.push({ key, at });
    }
    const oldest = Date.now() - MAX_AGE_DAYS * 24 * 3600 * 1000;
    drafts.sort((a, b) => b.at - a.at);
    drafts.forEach(({ key, at }, index) => {
      if (index >= MAX_DRAFTS || at < oldest) localStorage.removeItem(key);
    });
  }
}
