// Parley browser client: protocol.md v1 over a WebSocket, microphone capture through an
// AudioWorklet. Dependency-free ES module.
//
//   const client = new ParleyClient({ url: "ws://host:8765/v1/stream", diarization: true });
//   client.addEventListener("final", (e) => console.log(e.detail.text, e.detail.speaker));
//   await client.start();        // asks for the microphone, connects, streams
//   await client.stop();         // flushes, waits for the last finals, closes
//
// Events (CustomEvent, message in `detail`): started, speech_started, partial, final,
// speaker_update, finalized, ended, error, level ({ rms }), state ({ state }), closed
// ({ code, reason }), resuming ({ code }), resumed (session_resumed).
//
// Reconnect policy: a dropped connection (close 1006: Wi-Fi, a sleeping laptop) is
// resumed within the server's resume window (protocol.md section 6a): the same
// session, its speaker labels kept, the audio the server did not get sent again (up to
// resumeBufferBytes of the latest), and no message twice. Any other close ends the
// session; the page may call start() again for a new one.

export const PROTOCOL_VERSION = 1;
const TARGET_RATE = 16000;
const CHUNK_SECONDS = 0.1;
const RESUME_BUFFER_BYTES = 2 * 1024 * 1024; // 64 s of 16 kHz PCM16
const DROPPED = 1006; // what a browser reports for a connection lost without a close

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
    this.options = { url: "/v1/stream", partials: true,
                     resumeBufferBytes: RESUME_BUFFER_BYTES, ...options };
    this.state = "idle";
    this.session = null;
    this.resumes = 0;
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

  /** Ask for the microphone, connect, and stream until stop(). */
  async start() {
    if (this.state !== "idle" && this.state !== "closed") {
      throw new ParleyError(`cannot start while ${this.state}`, "bad_state");
    }
    this._setState("starting");
    try {
      this._audio = await openMicrophone((chunk) => this._send(chunk),
                                         (rms) => this._emit("level", { rms }));
      await this.connect(this._audio.sampleRate);
      this._audio.resume();
      this._setState("streaming");
    } catch (error) {
      await this._closeAudio();
      this._setState("closed");
      throw error;
    }
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

  /** Send audio yourself: an ArrayBuffer of PCM16 LE at the session's rate. */
  sendAudio(buffer) {
    this._send(buffer);
  }

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
  finalize() {
    this._control("finalize");
  }

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

function parseMessage(data) {
  if (typeof data !== "string") return null;
  try {
    const message = JSON.parse(data);
    return message && typeof message.type === "string" ? message : null;
  } catch {
    return null;
  }
}

/** Microphone → worklet → PCM16 chunks of 100 ms, at 16 kHz where the browser allows. */
async function openMicrophone(onChunk, onLevel) {
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true },
  });
  let context;
  let source;
  try {
    // Chromium resamples the microphone to the context's rate itself.
    context = new AudioContext({ sampleRate: TARGET_RATE });
    source = context.createMediaStreamSource(stream);
  } catch {
    // Firefox cannot connect a device to a context of another rate: keep the device's
    // rate and declare it in sample_rate; the server resamples.
    if (context) await context.close();
    context = new AudioContext();
    source = context.createMediaStreamSource(stream);
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
  source.connect(node);
  await context.suspend();
  return {
    sampleRate: context.sampleRate,
    resume: () => context.resume(),
    flush: () => new Promise((resolve) => {
      flushed = resolve;
      node.port.postMessage({ flush: true });
      setTimeout(resolve, 500); // a suspended context never answers
    }),
    close: async () => {
      stream.getTracks().forEach((track) => track.stop());
      source.disconnect();
      node.disconnect();
      if (context.state !== "closed") await context.close();
    },
  };
}
