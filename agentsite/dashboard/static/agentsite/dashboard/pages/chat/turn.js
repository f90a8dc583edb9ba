// One reply streaming in (POST /api/sessions/:id/chat or .../messages/:mid/regenerate, SSE) and how it is
// stopped. stop() asks the server (POST .../messages/:mid/stop): it stores the reply `stopped` with the text
// so far and ends this very stream with `done {status: "stopped"}`, so the stream is read on until then. A
// stop the server refuses or cannot be reached for hangs up instead (the reply is then kept `interrupted`);
// abort() hangs up at once (leaving the page, New chat). Invariant: a stop asked before the stream's `start`
// (which names the reply) is sent as soon as `start` comes, never dropped.
export class Turn {
  constructor(ctx) {
    this.ctx = ctx;
    this.sessionId = null;
    this.controller = new AbortController();
    this.messageId = null; // the reply's, from `start`
    this.stopAsked = false;
    this.stopSent = false;
  }

  get aborted() {
    return this.controller.signal.aborted;
  }

  // Streams `path` with `body`, calling onEvent({event, data}) for each event; resolves when the stream ends.
  async run(path, body, onEvent) {
    await this.ctx.stream(path, { body, signal: this.controller.signal, onEvent: (event) => {
      if (event.event === "start" && event.data?.message_id) {
        this.messageId = event.data.message_id;
        if (this.stopAsked) this.sendStop();
      }
      onEvent(event);
    } });
  }

  stop() {
    if (this.stopAsked || this.aborted) return;
    this.stopAsked = true;
    if (this.messageId) this.sendStop();
  }

  async sendStop() {
    if (this.stopSent) return;
    this.stopSent = true;
    const path = `/api/sessions/${encodeURIComponent(this.sessionId)}/messages/${encodeURIComponent(this.messageId)}/stop`;
    try {
      await this.ctx.api(path, { method: "POST" });
    } catch {
      this.abort();
    }
  }

  abort() {
    this.controller.abort();
  }
}
