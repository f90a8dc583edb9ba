// Voice for the chat: dictation (the server's speech-to-text from a recording, or the browser's own
// recognition when the configured provider is `browser`) and read-aloud (the server's text-to-speech, or
// the browser's speech synthesis). Every failure is thrown as an Error whose message a person can act on:
// the chat page shows it; nothing fails silently (open-webui#12276).
import { ApiError } from "../../api.js";

const MIN_RECORDING_S = 0.5;

function recognitionClass() {
  return window.SpeechRecognition || window.webkitSpeechRecognition || null;
}

function microphoneProblem(error) {
  const name = error?.name || "";
  if (name === "NotAllowedError" || name === "SecurityError") {
    return "The microphone is blocked: allow it for this site in the browser, then try again.";
  }
  if (name === "NotFoundError" || name === "OverconstrainedError") return "No microphone was found.";
  if (name === "NotReadableError") return "The microphone is in use by another application or cannot be read.";
  return `The microphone could not be used: ${error?.message || name || "unknown error"}.`;
}

// One dictation: start() begins listening; finish() ends it and resolves with the text heard.
export class Dictation {
  constructor({ api, provider }) {
    this.api = api;
    this.provider = provider;
    this.stream = null;
    this.recorder = null;
    this.recognition = null;
    this.chunks = [];
  }

  async start() {
    if (this.provider === "browser") return this.startRecognition();
    if (!navigator.mediaDevices?.getUserMedia || typeof MediaRecorder === "undefined") {
      throw new Error("This browser cannot record audio (it needs a secure origin: https or localhost).");
    }
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    } catch (error) {
      throw new Error(microphoneProblem(error));
    }
    this.recorder = new MediaRecorder(this.stream);
    this.recorder.addEventListener("dataavailable", (event) => event.data.size && this.chunks.push(event.data));
    this.recorder.start();
    this.startedAt = performance.now();
  }

  startRecognition() {
    const Recognition = recognitionClass();
    if (!Recognition) {
      throw new Error("Speech input is set to the browser's recognition, which this browser does not have.");
    }
    this.recognition = new Recognition();
    this.recognition.interimResults = false;
    this.recognition.continuous = true;
    this.recognition.lang = document.documentElement.lang || "en";
    this.heard = [];
    this.failure = null;
    // The recognition may end on its own (an error, the service giving up): `onEnded` lets the page finish
    // the dictation then, so a failure shows at once instead of at the next click.
    this.ended = new Promise((resolve) => {
      this.recognition.addEventListener("end", () => { resolve(); this.onEnded?.(); });
    });
    this.recognition.addEventListener("result", (event) => {
      for (let i = event.resultIndex; i < event.results.length; i++) {
        if (event.results[i].isFinal) this.heard.push(event.results[i][0].transcript);
      }
    });
    this.recognition.addEventListener("error", (event) => {
      this.failure = event.error === "not-allowed" ? microphoneProblem({ name: "NotAllowedError" })
        : `Speech recognition failed: ${event.error}.`;
    });
    this.recognition.start();
  }

  // Stop listening and return the text (server STT: the recording is sent to /api/voice/stt).
  async finish() {
    if (this.recognition) {
      this.recognition.stop();
      await this.ended;
      if (this.failure) throw new Error(this.failure);
      return this.heard.join(" ").trim();
    }
    const seconds = (performance.now() - this.startedAt) / 1000;
    const stopped = new Promise((resolve) => this.recorder.addEventListener("stop", resolve, { once: true }));
    this.recorder.stop();
    await stopped;
    this.release();
    const blob = new Blob(this.chunks, { type: this.recorder.mimeType || "audio/webm" });
    if (!blob.size) throw new Error("Nothing was recorded: check the microphone.");
    // Under half a second the browser may not have written a decodable file, and nobody says much anyway.
    if (seconds < MIN_RECORDING_S) throw new Error("The recording was too short: speak, then finish the dictation.");
    const form = new FormData();
    form.append("file", blob, `dictation.${blob.type.includes("ogg") ? "ogg" : "webm"}`);
    const answer = await this.api("/api/voice/stt", { method: "POST", body: form });
    if (answer.fallback) {
      throw new Error("The server asks the browser to recognise speech: set speech input to Browser, or dictate again.");
    }
    return (answer.text || "").trim();
  }

  cancel() {
    try {
      this.recognition?.abort();
      if (this.recorder?.state === "recording") this.recorder.stop();
    } finally {
      this.release();
    }
  }

  release() {
    for (const track of this.stream?.getTracks() || []) track.stop();
    this.stream = null;
  }
}

// Reads texts aloud one at a time; speak() resolves when playback has started and the returned promise
// `done` settles when it ends. stop() silences it.
export class Reader {
  constructor({ api, provider, voice }) {
    this.api = api;
    this.provider = provider;
    this.voice = voice;
    this.audio = null;
    this.url = null;
  }

  async speak(text, onEnd, onError) {
    this.stop();
    if (this.provider === "browser") return this.speakInBrowser(text, onEnd, onError);
    const response = await this.api("/api/voice/tts", { method: "POST", raw: true,
      body: { text: text.slice(0, 4000), format: "mp3", ...(this.voice ? { voice: this.voice } : {}) } });
    if ((response.headers.get("Content-Type") || "").includes("application/json")) {
      const answer = await response.json();
      if (answer.fallback) return this.speakInBrowser(text, onEnd, onError);
      throw new ApiError(response.status, "bad_response", "The read-aloud answer was not audio.");
    }
    this.url = URL.createObjectURL(await response.blob());
    this.audio = new Audio(this.url);
    this.audio.addEventListener("ended", () => { this.stop(); onEnd?.(); });
    try {
      await this.audio.play();
    } catch (error) {
      this.stop();
      throw new Error(`The audio could not be played: ${error.message}`);
    }
  }

  // Resolves when speech starts; a failure before that rejects (the page shows it), one after it goes to
  // onError. stop()'s own cancel ("interrupted", "canceled") is not a failure.
  speakInBrowser(text, onEnd, onError) {
    if (!("speechSynthesis" in window)) {
      throw new Error("Read-aloud is set to the browser's speech synthesis, which this browser does not have.");
    }
    const utterance = new SpeechSynthesisUtterance(text);
    return new Promise((resolve, reject) => {
      let started = false;
      utterance.addEventListener("start", () => { started = true; resolve(); });
      utterance.addEventListener("end", () => { resolve(); onEnd?.(); });
      utterance.addEventListener("error", (event) => {
        onEnd?.();
        if (event.error === "interrupted" || event.error === "canceled") return resolve();
        const failure = new Error(`the browser's speech synthesis failed (${event.error || "unknown error"}).`);
        if (started) onError?.(failure);
        else reject(failure);
      });
      window.speechSynthesis.speak(utterance);
    });
  }

  stop() {
    if (this.audio) {
      this.audio.pause();
      this.audio = null;
    }
    if (this.url) URL.revokeObjectURL(this.url);
    this.url = null;
    if ("speechSynthesis" in window) window.speechSynthesis.cancel();
  }
}
