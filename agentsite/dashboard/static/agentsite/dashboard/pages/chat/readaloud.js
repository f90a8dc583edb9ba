// A message's "Read aloud": one message read at a time with the configured text-to-speech (voice.js Reader).
import { Reader } from "./voice.js";

// options: api, voiceConfig() -> Promise of /api/config, log (the element whose buttons it relabels),
// problem(message) (a failure, shown on the composer).
export class ReadAloud {
  constructor(options) {
    Object.assign(this, options);
    this.reader = null; // the read-aloud under way, and the message it reads
    this.reading = null;
  }

  // Reads the view's message (stopping any other), or stops it when it is being read.
  async toggle(view, button) {
    if (this.reader && this.reading === view) {
      this.stop();
      button.textContent = "Read aloud";
      return;
    }
    const config = await this.voiceConfig();
    this.reader?.stop();
    this.reader = new Reader({ api: this.api, provider: config.tts_provider, voice: config.tts_voice });
    for (const other of this.log().querySelectorAll(".read-aloud")) other.textContent = "Read aloud";
    this.reading = view;
    button.textContent = "Stop reading";
    const done = () => {
      if (this.reading === view) this.reading = null;
      button.textContent = "Read aloud";
    };
    const failed = (error) => {
      done();
      this.problem(`Read-aloud failed: ${error.message}`);
    };
    try {
      await this.reader.speak(view.text(), done, failed);
    } catch (error) {
      failed(error);
    }
  }

  stop() {
    this.reader?.stop();
    this.reading = null;
  }
}
