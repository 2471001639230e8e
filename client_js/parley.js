// Parley browser client: protocol.md v1 over a WebSocket, audio captured through an
// AudioWorklet. Dependency-free ES module.
//
//   const client = new ParleyClient({ url: "ws://host:8765/v1/stream", diarization: true });
//   client.addEventListener("final", (e) => console.log(e.detail.text, e.detail.speaker));
//   await client.start();        // asks for the microphone, connects, streams
//   await client.stop();         // flushes, waits for the last finals, closes
//
// `source`: "microphone" (the default; `microphoneId` from microphones() picks one), "tab"
// (the sound of a tab, window or screen the user shares: a meeting in another tab, a
// video), or "tab+microphone" (both mixed: a meeting's far side and the user together).
//
// Events (CustomEvent, message in `detail`): started, speech_started, partial, final,
// speaker_update, speaker_names, finalized, ended, error, level ({ rms }), state
// ({ state }), closed ({ code, reason }), resuming ({ code }), resumed (session_resumed),
// source_ended (the user stopped sharing: the stream is then stopped as stop() does).
//
// A dropped connection (close 1006: Wi-Fi, a sleeping laptop) is resumed within the
// server's resume window (protocol.md section 6a): the same session and speaker labels,
// the audio the server did not get sent again (up to resumeBufferBytes of the latest),
// no message twice. Any other close ends the session; start() again begins a new one.

export const PROTOCOL_VERSION = 1;
const TARGET_RATE = 16000;
const CHUNK_SECONDS = 0.1;
const RESUME_BUFFER_BYTES = 2 * 1024 * 1024; // 64 s of 16 kHz PCM16
const DROPPED = 1006; // what a browser reports for a connection lost without a close

export const SOURCES = ["microphone", "tab", "tab+microphone"];

// The microphone as speech wants it; a shared tab's sound is taken as it plays.
const MICROPHONE = { channelCount: 1, echoCancellation: true, noiseSuppression: true };
const TAB_SOUND = { echoCancellation: false, noiseSuppression: false, autoGainControl: false,
                    suppressLocalAudioPlayback: false }; // the user still hears the tab

export class ParleyError extends Error {
  constructor(message, code) {
    super(message);
    this.code = code;
  }
}

// The decoding options (protocol.md section 1): lists become comma-separated values.
export const DECODING_OPTIONS = ["languages", "task", "keyterms", "prompt", "redact", "numerals",
                                 "replace", "filler_words", "profanity_filter", "dictation"];

export function streamUrl(base, { token, language, diarization, partials, sampleRate, ...rest } = {}) {
  const url = new URL(base, typeof location === "undefined" ? undefined : location.href);
  if (url.protocol === "http:") url.protocol = "ws:";
  if (url.protocol === "https:") url.protocol = "wss:";
  if (!url.pathname.endsWith("/v1/stream")) url.pathname = "/v1/stream";
  const query = url.searchParams;
  query.set("encoding", "pcm_s16le");
  query.set("sample_rate", String(sampleRate ?? TARGET_RATE));
  query.set("channels", "1");
  if (language) query.set("language", language);
  if (diarization !== undefined) query.set("diarization", String(Boolean(diarization)));
  if (partials !== undefined) query.set("partials", String(Boolean(partials)));
  for (const name of DECODING_OPTIONS) {
    const value = rest[name];
    if (value === undefined || value === null || value === "" || value?.length === 0) continue;
    query.set(name, Array.isArray(value) ? value.join(",") : String(value));
  }
  if (token) query.set("token", token);
  return url.toString();
}

export class ParleyClient extends EventTarget {
  constructor(options = {}) {
    super();
    this.options = { url: "/v1/stream", partials: true, source: "microphone",
                     resumeBufferBytes: RESUME_BUFFER_BYTES, ...options };
    this.state = "idle";
    this.session = null;
    this.resumes = 0;
    this.inputs = []; // what start() captures: [{ kind: "tab" | "microphone", label }]
    this._socket = null;
    this._audio = null;
    this._ended = null;
    this._sentBytes = 0;
    this._rate = TARGET_RATE;
  }

  /** Seconds of audio sent in this session: the stream time the server has heard. */
  audioSentSeconds() {
    return this._sentBytes / 2 / this._rate;
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  _setState(state) {
    this.state = state;
    this._emit("state", { state });
  }

  /** Ask for the source's audio (the microphone, a shared tab), connect, and stream
   * until stop(). Rejects with a ParleyError: `bad_source`, `no_tab_audio` (nothing to
   * share a tab's sound with, or the user shared none), or the server's refusal. */
  async start() {
    if (this.state !== "idle" && this.state !== "closed") {
      throw new ParleyError(`cannot start while ${this.state}`, "bad_state");
    }
    this._setState("starting");
    try {
      this._audio = await openAudio(this.options, (chunk) => this._send(chunk),
                                    (rms) => this._emit("level", { rms }),
                                    () => this._sourceEnded());
      this.inputs = this._audio.inputs;
      await this.connect(this._audio.sampleRate);
      for (const { name, clip } of this.options.knownSpeakers ?? []) await this.knownSpeaker(name, clip);
      this._audio.resume();
      this._setState("streaming");
    } catch (error) {
      await this._closeAudio();
      this._setState("closed");
      throw error;
    }
  }

  // A voice you know (`knownSpeakers` are sent so by start()), a Blob of 2 to 10 s of it.
  async knownSpeaker(name, clip) {
    this._socket.send(JSON.stringify({ type: "known_speaker", name, audio: await asDataUrl(clip) }));
  }

  /** Open the session (start() does this; call it yourself to send your own audio). */
  connect(sampleRate = TARGET_RATE) {
    const url = streamUrl(this.options.url, { ...this.options, sampleRate });
    this._rate = sampleRate;
    this._sentBytes = 0;
    this._url = url;
    this._lastSeq = 0;
    this._kept = []; // [offset, ArrayBuffer] of audio kept to send again after a drop
    this._keptBytes = 0;
    this._endSent = false;
    this._sessionEnded = false;
    let ended;
    this._ended = new Promise((resolve) => { ended = resolve; });
    this._finish = ended;
    return new Promise((resolve, reject) => {
      this._attach(new WebSocket(url), resolve, reject);
    });
  }

  // One connection's handlers: the first one's (resolve/reject the connect), or a
  // resumed one's (first comes session_resumed).
  _attach(socket, resolve, reject) {
    socket.binaryType = "arraybuffer";
    this._socket = socket;
    let opened = false;
    socket.addEventListener("message", (event) => {
      const message = parseMessage(event.data);
      if (!message) return;
      if (typeof message.seq === "number") {
        if (message.seq <= this._lastSeq) return; // had it before the drop
        this._lastSeq = message.seq;
      }
      if (message.type === "session_started" || message.type === "session_resumed") {
        opened = true;
        if (message.type === "session_started") this.session = message;
        resolve(message);
        this._emit(message.type === "session_started" ? "started" : "resumed", message);
        return;
      }
      if (message.type === "error") {
        this._emit("error", message);
        if (!opened) reject(new ParleyError(message.message, message.code));
        return;
      }
      if (message.type === "session_ended") {
        this._sessionEnded = true;
        this._emit("ended", message);
        return;
      }
      this._emit(message.type, message);
    });
    socket.addEventListener("close", (event) => {
      if (socket !== this._socket) return;
      if (opened && event.code === DROPPED && !this._sessionEnded && this.session?.resume_token) {
        this._resume(event.code);
        return;
      }
      this._closed(event);
      if (!opened) reject(new ParleyError(event.reason || "connection failed", "closed"));
    });
  }

  _closed(event) {
    this._closeAudio();
    this._setState("closed");
    this._emit("closed", { code: event.code, reason: event.reason });
    this._finish({ code: event.code, reason: event.reason });
  }

  // Reconnect with the token until the window passes; then send again what the server
  // did not get (and the end of stream, if it was sent).
  async _resume(code) {
    this._resuming = true; // audio is kept, not sent, until what was lost is sent again
    this._emit("resuming", { code });
    const windowS = this.session.limits?.resume_window_s ?? 0;
    const deadline = Date.now() + windowS * 1000;
    const url = new URL(this._url);
    const token = url.searchParams.get("token");
    url.search = "";
    url.searchParams.set("resume", this.session.resume_token);
    if (token) url.searchParams.set("token", token);
    let wait = 50;
    while (Date.now() + wait < deadline) {
      url.searchParams.set("last_seq", String(this._lastSeq));
      try {
        const resumed = await new Promise((resolve, reject) => {
          this._attach(new WebSocket(url.toString()), resolve, reject);
        });
        const from = resumed.audio_received_bytes;
        for (const [offset, buffer] of this._kept) {
          if (offset + buffer.byteLength > from) {
            this._socket.send(buffer.slice(Math.max(0, from - offset)));
          }
        }
        if (this._endSent) this._socket.send(JSON.stringify({ type: "end_of_stream" }));
        this._resuming = false;
        this.resumes += 1;
        return;
      } catch (error) {
        if (error.code && error.code !== "closed") break; // refused: no use retrying
        await new Promise((r) => setTimeout(r, wait));
        wait = Math.min(2 * wait, 1000);
      }
    }
    this._resuming = false;
    this._closed({ code, reason: "the session could not be resumed" });
  }

  // The user stopped sharing the tab (the browser's own "Stop sharing"): what was heard
  // still gets its finals, as after stop().
  _sourceEnded() {
    this._emit("source_ended", {});
    if (this.state === "streaming") this.stop();
  }

  /** Send audio yourself: an ArrayBuffer of PCM16 LE at the session's rate. */
  sendAudio(buffer) { this._send(buffer); }

  _send(buffer) {
    if (!this._socket) return;
    if (this.session?.resume_token) {
      this._kept.push([this._sentBytes, buffer]);
      this._keptBytes += buffer.byteLength;
      while (this._keptBytes - this._kept[0][1].byteLength >= this.options.resumeBufferBytes) {
        this._keptBytes -= this._kept.shift()[1].byteLength;
      }
    } else if (this._socket.readyState !== WebSocket.OPEN) {
      return;
    }
    this._sentBytes += buffer.byteLength;
    if (this._socket.readyState === WebSocket.OPEN && !this._resuming) this._socket.send(buffer);
  }

  /** Close the open segment now: its final comes, then a `finalized` event. */
  finalize() { this._control("finalize"); }

  /** Stop the microphone, let the server finish, resolve when the socket is closed. */
  async stop() {
    if (!this._socket) return { code: 1000 };
    this._setState("stopping");
    if (this._audio) await this._audio.flush();
    await this._closeAudio();
    this._control("end_of_stream");
    return this._ended;
  }

  _control(type) {
    if (type === "end_of_stream") this._endSent = true; // said again after a resume
    if (this._socket && this._socket.readyState === WebSocket.OPEN && !this._resuming) {
      this._socket.send(JSON.stringify({ type }));
    }
  }

  async _closeAudio() {
    const audio = this._audio;
    this._audio = null;
    if (audio) await audio.close();
  }
}

/** A Blob as a base64 data URL (a known speaker's clip, on the stream or in a form). */
export const asDataUrl = (blob) => new Promise((resolve, reject) => {
  const reader = Object.assign(new FileReader(), { onload: () => resolve(reader.result), onerror: reject });
  reader.readAsDataURL(blob);
});

function parseMessage(data) {
  let message = null;
  try { message = typeof data === "string" ? JSON.parse(data) : null; } catch { /* not JSON */ }
  return message && typeof message.type === "string" ? message : null;
}

/** The microphones the browser offers, as `{ id, label }` (`id` is a `microphoneId`):
 * none until the page has been allowed one, and not Chromium's "default" and
 * "communications" entries, which stand for one of the others. */
export async function microphones() {
  const devices = await navigator.mediaDevices.enumerateDevices();
  const standIns = ["", "default", "communications"];
  return devices.filter((d) => d.kind === "audioinput" && !standIns.includes(d.deviceId))
    .map((d) => ({ id: d.deviceId, label: d.label }));
}

// The source's streams, each as [kind, stream]: a shared tab's sound, the microphone, or
// both.
async function captureStreams({ source, microphoneId }) {
  if (!SOURCES.includes(source)) {
    throw new ParleyError(`unknown source "${source}": one of ${SOURCES.join(", ")}`, "bad_source");
  }
  const streams = [];
  try {
    if (source !== "microphone") streams.push(["tab", await captureTab()]);
    if (source !== "tab") {
      const chosen = microphoneId ? { deviceId: { exact: microphoneId } } : {};
      const audio = { ...MICROPHONE, ...chosen };
      streams.push(["microphone", await navigator.mediaDevices.getUserMedia({ audio })]);
    }
  } catch (error) {
    streams.forEach(([, stream]) => stream.getTracks().forEach((track) => track.stop()));
    throw error;
  }
  return streams;
}

// A tab, window or screen the user picks, its sound only. Browsers share sound only
// with a picture, so the picture is asked for and stopped at once.
async function captureTab() {
  if (!navigator.mediaDevices.getDisplayMedia) {
    throw new ParleyError("this browser cannot share a tab's sound", "no_tab_audio");
  }
  const shared = await navigator.mediaDevices.getDisplayMedia({
    video: true, audio: TAB_SOUND, systemAudio: "include", selfBrowserSurface: "exclude",
  });
  shared.getVideoTracks().forEach((track) => track.stop());
  if (shared.getAudioTracks().length === 0) {
    throw new ParleyError("no sound was shared: share a tab and tick \"Share tab audio\"",
                          "no_tab_audio");
  }
  return new MediaStream(shared.getAudioTracks());
}

/** The source's audio → worklet → PCM16 chunks of 100 ms, at 16 kHz where the browser
 * allows; several streams (a tab and the microphone) are summed. `onEnded` is called
 * when a shared tab stops being shared. */
async function openAudio(options, onChunk, onLevel, onEnded) {
  const captured = await captureStreams(options);
  const streams = captured.map(([, stream]) => stream);
  let context;
  let sources;
  try {
    // Chromium resamples each stream to the context's rate itself.
    context = new AudioContext({ sampleRate: TARGET_RATE });
    sources = streams.map((stream) => context.createMediaStreamSource(stream));
  } catch {
    // Firefox cannot connect a device to a context of another rate: keep the device's
    // rate and declare it in sample_rate; the server resamples.
    if (context) await context.close();
    context = new AudioContext();
    sources = streams.map((stream) => context.createMediaStreamSource(stream));
  }
  await context.audioWorklet.addModule(new URL("./worklet.js", import.meta.url));
  const node = new AudioWorkletNode(context, "parley-pcm16", {
    processorOptions: { chunkSamples: Math.round(context.sampleRate * CHUNK_SECONDS) },
  });
  let flushed = null;
  node.port.onmessage = (event) => {
    const { pcm, rms, flushed: done } = event.data;
    if (pcm) onChunk(pcm);
    if (rms !== undefined) onLevel(rms);
    if (done && flushed) flushed();
  };
  sources.forEach((source) => source.connect(node)); // an input sums what connects to it
  const inputs = captured.map(([kind, stream]) => {
    const track = stream.getAudioTracks()[0];
    if (kind === "tab") track.addEventListener("ended", onEnded, { once: true });
    return { kind, label: track.label };
  });
  await context.suspend();
  return {
    inputs,
    sampleRate: context.sampleRate,
    resume: () => context.resume(),
    flush: () => new Promise((resolve) => {
      flushed = resolve;
      node.port.postMessage({ flush: true });
      setTimeout(resolve, 500); // a suspended context never answers
    }),
    close: async () => {
      streams.forEach((stream) => stream.getTracks().forEach((track) => track.stop()));
      sources.forEach((source) => source.disconnect());
      node.disconnect();
      if (context.state !== "closed") await context.close();
    },
  };
}
