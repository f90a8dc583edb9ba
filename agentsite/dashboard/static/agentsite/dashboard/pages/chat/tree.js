// A chat's messages as the tree GET /api/sessions/:id/messages answers (each message with its parent and
// children, oldest first) and the selected path: `current` and its ancestors, the only branch the log
// shows and the only history a turn sends. Data only, no DOM. Invariant: a message's `children` and the
// roots stay oldest first, so "2/3" means the same message here as on the server.
export class Tree {
  constructor(messages = [], current = null) {
    this.byId = new Map();
    this.roots = [];
    for (const message of messages) this.byId.set(message.id, { ...message, children: [...(message.children || [])] });
    for (const message of messages) if (!message.parent) this.roots.push(message.id);
    this.current = current;
  }

  get(id) {
    return this.byId.get(id) || null;
  }

  // A message just stored (a stream's `start`): the newest child of its parent.
  add(message) {
    if (this.byId.has(message.id)) return;
    this.byId.set(message.id, { children: [], ...message });
    const parent = message.parent ? this.get(message.parent) : null;
    if (parent) parent.children.push(message.id);
    else if (!message.parent) this.roots.push(message.id);
  }

  update(id, fields) {
    const message = this.get(id);
    if (message) Object.assign(message, fields);
  }

  // The message and its siblings (the versions of one question, or the regenerations of one reply).
  siblings(id) {
    const message = this.get(id);
    if (!message) return [];
    const parent = message.parent ? this.get(message.parent) : null;
    return parent ? parent.children : this.roots;
  }

  // The selected path, first question first. A `current` the tree does not hold (none yet, or a session
  // from before the tree) falls back to the newest branch, so a chat never shows empty by mistake.
  path() {
    let id = this.get(this.current) ? this.current : this.newestLeaf();
    const path = [];
    while (id && path.length <= this.byId.size) {
      const message = this.get(id);
      if (!message) break;
      path.push(message);
      id = message.parent;
    }
    return path.reverse();
  }

  newestLeaf() {
    let id = this.roots.at(-1) || null;
    while (id && this.get(id)?.children.length) id = this.get(id).children.at(-1);
    return id;
  }

  // The last question on the selected path (what Up arrow in an empty composer edits).
  lastQuestion() {
    return this.path().filter((message) => message.role === "user").at(-1) || null;
  }
}
