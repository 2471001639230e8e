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
// ({ code, reason }).
//
// Reconnect policy: none automatic. A session is one stream; after a close the server
// has settled everything it will say, so reconnecting silently would split the
// transcript into two sessions with separate speaker labels. The page decides: on
// `closed` with a code other than 1000, it may call start() again (a new session).

export const PROTOCOL_VERSION = 1;
const TARGET_RATE = 16000;
const CHUNK_SECONDS = 0.1;

export class ParleyError extends Error {
  constructor(message, code) {
    super(message);
    this.code = code;
  }
}

export function streamUrl(base, { token, language, diarization, partials, sampleRate } = {}) {
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
  if (token) query.set("token", token);
  return url.toString();
}

export class ParleyClient extends EventTarget {
  constructor(options = {}) {
    super();
    this.options = { url: "/v1/stream", partials: true, ...options };
    this.state = "idle";
    this.session = null;
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
    const socket = new WebSocket(url);
    socket.binaryType = "arraybuffer";
    this._socket = socket;
    let ended;
    this._ended = new Promise((resolve) => { ended = resolve; });
    return new Promise((resolve, reject) => {
      let opened = false;
      socket.addEventListener("message", (event) => {
        const message = parseMessage(event.data);
        if (!message) return;
        if (message.type === "session_started") {
          opened = true;
          this.session = message;
          this._emit("started", message);
          resolve(message);
          return;
        }
        if (message.type === "error") {
          this._emit("error", message);
          if (!opened) reject(new ParleyError(message.message, message.code));
          return;
        }
        if (message.type === "session_ended") {
          this._emit("ended", message);
          return;
        }
        this._emit(message.type, message);
      });
      socket.addEventListener("close", (event) => {
        this._closeAudio();
        this._setState("closed");
        this._emit("closed", { code: event.code, reason: event.reason });
        ended({ code: event.code, reason: event.reason });
        if (!opened) reject(new ParleyError(event.reason || "connection failed", "closed"));
      });
    });
  }

  /** Send audio yourself: an ArrayBuffer of PCM16 LE at the session's rate. */
  sendAudio(buffer) {
    this._send(buffer);
  }

  _send(buffer) {
    if (this._socket && this._socket.readyState === WebSocket.OPEN) {
      this._socket.send(buffer);
      this._sentBytes += buffer.byteLength;
    }
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
    if (this._socket && this._socket.readyState === WebSocket.OPEN) {
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
