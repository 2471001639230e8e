// The demo page: start/stop, level meter, live partial, speaker-coloured finals,
// speaker renaming, transcript downloads, errors and the latency of the last final; the
// audio from a chosen microphone, a shared tab (a meeting in another tab) or both; and
// a recording chosen on the page, transcribed whole (who said what).
import { DECODING_OPTIONS, ParleyClient, asDataUrl, microphones } from "./parley.js";
import { clock, runsOf, transcriptAs } from "./formats.js";
import { ME, byTime, isEcho, keyOf, near, placed, shifted, speakerOf } from "./meeting.js";

const $ = (id) => document.getElementById(id);
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const names = new Map();          // speaker label → name chosen by the user
const voiceNames = new Map();     // speaker label → a known voice's name, as the server matched it
const known = [];                 // the voices the user knows: { name, clip }, a clip's File
const segments = new Map();       // final's key (keyOf) → final as last received
let clients = [];                 // the live sessions of the last Start: one, or a meeting's two
let runs = 0;                     // each Start's (or recording's) segments come after the last's
function colour(speaker) {
  if (speaker === ME) return "#444";
  const index = speaker ? Number(speaker.replace(/\D/g, "")) - 1 : -1;
  return index >= 0 ? COLOURS[index % COLOURS.length] : "#999";
}

// Your finals of a meeting looked at again whenever either session's final comes: the
// tab's final of the same words may come before yours or after. Only yours near the new
// final can change.
function markEchoes(final) {
  const run = [...segments.values()].filter((f) => f.run === final.run);
  const mine = final.who === "me" ? [final] : run.filter((f) => f.who === "me" && near(f, final));
  for (const f of mine) {
    if (isEcho(f, run) === Boolean(f.echo)) continue;
    f.echo = !f.echo;
    render(f);
  }
}

function nameOf(speaker) {
  return speaker ? names.get(speaker) ?? voiceNames.get(speaker) ?? speaker : "";
}

function render(final) {
  let element = document.querySelector(`.segment[data-key="${final.key}"]`);
  if (!final.text.trim()) {
    element?.remove();  // nothing was said (the server's no-speech guard emptied it)
    return;
  }
  if (!element) {
    element = document.createElement("div");
    element.className = "segment";
    element.dataset.key = final.key;
    const next = [...$("transcript").children].find((e) => byTime(segments.get(e.dataset.key), final) > 0);
    $("transcript").insertBefore(element, next ?? null);
  }
  element.dataset.speaker = final.speaker ?? "";
  element.hidden = Boolean(final.echo);
  element.classList.toggle("echo", Boolean(final.echo));
  element.style.setProperty("--speaker-colour", colour(final.speaker));
  element.replaceChildren();
  const time = document.createElement("span");
  time.className = "time";
  time.textContent = clock(final.start);
  // Spaces between the labels and the words, not only margins: copied text (and the
  // element's text) reads "S2 Chicago", not "S2Chicago".
  element.append(time, " ");
  if (final.language && clients[0]?.session?.model_languages?.length > 1) {
    const language = document.createElement("span");
    language.className = "language";
    language.textContent = final.language;
    element.append(language, " ");
  }
  if (final.warnings?.includes("language_unsupported")) {
    // The model wrote English it probably did not hear: say so rather than show it as said.
    element.classList.add("doubtful");
    element.title = "this model may not read this language: the text is likely not what was said";
  } else {
    element.classList.remove("doubtful");
    element.removeAttribute("title");
  }
  for (const run of runsOf(final)) {
    const span = document.createElement("span");
    span.className = "run";
    span.style.setProperty("--speaker-colour", colour(run.speaker));
    if (run.speaker) {
      const who = document.createElement("span");
      who.className = "speaker";
      who.dataset.speaker = run.speaker;
      who.textContent = nameOf(run.speaker);
      span.append(who, " ");
    }
    span.append(document.createTextNode(run.words.join(" ") + " "));
    element.append(span);
  }
}

function showError(message) {
  $("error").hidden = !message;
  $("error").textContent = message ?? "";
}

function finals() {
  return [...segments.values()].filter((f) => f.text.trim() && !f.echo).sort(byTime);
}

function download(format) {
  const blob = new Blob([transcriptAs(format, finals(), nameOf)], { type: "text/plain" });
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = `transcript.${format}`;
  link.click();
  URL.revokeObjectURL(link.href);
}

function showState(state) {
  $("state").textContent = state;
  $("state").dataset.state = state;
}

// The server-sent events of a streamed transcription: its text as the windows are done
// (shown as the partial line is), then the segments with their speakers.
async function streamedSegments(answer) {
  const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
  const segments = [];
  let buffer = "", text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return segments;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = JSON.parse(buffer.slice(0, cut).replace(/^data: /, ""));
      buffer = buffer.slice(cut + 2);
      if (event.type === "transcript.text.delta") $("partial").textContent = text += event.delta;
      else if (event.type === "transcript.text.segment") segments.push(event);
      else if (event.type === "error") throw new Error(event.error.message);
    }
  }
}

// A recording goes to the server's file API in OpenAI's shape (protocol.md section 16):
// with speakers as diarized_json, streamed (its text shows as it is decoded, each
// segment's speaker at the end); without, verbose_json. Its segments replace the
// transcript, as finals would, so downloads and renaming work too.
async function transcribeFile(file) {
  showError(null);
  const params = new URLSearchParams(location.search);
  const translate = params.get("task") === "translate";  // into English: no speakers
  const speakers = $("diarization").checked && !translate;
  const form = new FormData();
  form.append("file", file, file.name);
  form.append("model", "whisper-1");
  form.append("response_format", speakers ? "diarized_json" : "verbose_json");
  if (speakers) form.append("stream", "true");
  for (const voice of speakers ? known : []) {
    form.append("known_speaker_names[]", voice.name);
    form.append("known_speaker_references[]", await asDataUrl(voice.clip));
  }
  const language = $("language").value.trim() || params.get("language");
  if (language) form.append("language", language);
  for (const name of DECODING_OPTIONS.filter((n) => n !== "task" && n !== "languages")) {
    if (params.has(name)) form.append(name, params.get(name));
  }
  const token = params.get("token");
  $("start").disabled = $("file").disabled = true;
  showState("transcribing");
  try {
    const answer = await fetch(translate ? "/v1/audio/translations" : "/v1/audio/transcriptions",
      { method: "POST", body: form, headers: token ? { Authorization: `Bearer ${token}` } : {} });
    if (!answer.ok) {
      const body = await answer.json().catch(() => ({}));
      throw new Error(body.error?.message ?? `${answer.status} ${answer.statusText}`);
    }
    const got = speakers ? await streamedSegments(answer) : (await answer.json()).segments;
    segments.clear();
    $("transcript").replaceChildren();
    const run = ++runs;
    got.forEach((segment, index) => {
      const final = { segment_id: index, key: keyOf(run, "file", index), run,
                      start: segment.start, end: segment.end,
                      text: segment.text.trim(), speaker: segment.speaker ?? null, words: [] };
      segments.set(final.key, final);
      render(final);
    });
    showState("done");
  } catch (error) {
    showError(`${file.name}: ${error.message}`);
    showState("idle");
  } finally {
    $("start").disabled = $("file").disabled = false;
    $("file").value = "";
    $("partial").textContent = "";
  }
}

// The sessions' states as one: streaming while any streams, closed once all are.
function shownState() {
  const states = clients.map((c) => c.state);
  return ["starting", "streaming", "stopping", "closed"].find((s) => states.includes(s)) ?? "idle";
}

function listen(client, run) {
  client.addEventListener("state", () => showState(shownState()));
  client.addEventListener("started", (e) => {
    listMicrophones();  // their names, now that the page may use one
    $("inputs").textContent = clients.flatMap((c) => c.inputs).map((i) => `${i.kind}: ${i.label}`).join(" + ");
    const languages = e.detail.model_languages ?? [];
    $("model").textContent = `${e.detail.model} · ` +
      (languages.length === 1 ? `${languages[0]} only` : `${languages.length} languages`);
  });
  client.addEventListener("level", (e) => {
    client.level = e.detail.rms;
    $("level").value = Math.max(...clients.map((c) => c.level ?? 0));
  });
  client.addEventListener("partial", (e) => { $("partial").textContent = e.detail.text; });
  client.addEventListener("final", (e) => {
    const final = placed(e.detail, client, run);
    segments.set(final.key, final);
    $("partial").textContent = "";
    render(final);
    if (client.who) markEchoes(final);
    const lastWord = e.detail.words.at(-1);
    const spokenUntil = lastWord ? lastWord.end : e.detail.end;
    const behind = client.audioSentSeconds() - spokenUntil;
    if (behind >= 0) $("latency").textContent = `last final ${behind.toFixed(1)} s after its speech`;
  });
  client.addEventListener("speaker_update", (e) => {
    const final = segments.get(keyOf(run, client.who, e.detail.segment_id));
    if (!final) return;
    const words = e.detail.words.map((w) => shifted(w, client));
    Object.assign(final, { speaker: speakerOf(e.detail, client), words });
    render(final);
  });
  client.addEventListener("speaker_names", (e) => {
    voiceNames.clear();
    Object.entries(e.detail.names).forEach(([label, name]) => voiceNames.set(label, name));
    segments.forEach(render);
  });
  client.addEventListener("error", (e) => showError(`${e.detail.code}: ${e.detail.message}`));
  // a meeting's tab no longer shared: the meeting is over for the microphone too
  client.addEventListener("source_ended", () => clients.forEach((c) => c !== client && c.stop()));
  client.addEventListener("closed", (e) => {
    if (e.detail.code !== 1000) showError(`connection closed (${e.detail.code}) ${e.detail.reason}`);
    if (!clients.every((c) => c.state === "closed")) return;
    $("inputs").textContent = "";
    $("start").disabled = $("file").disabled = false;
    $("stop").disabled = true;
  });
}

async function start() {
  showError(null);
  $("start").disabled = $("file").disabled = true;
  const params = new URLSearchParams(location.search);
  const options = {
    url: "/v1/stream",
    token: params.get("token") ?? undefined,
    language: $("language").value.trim() || params.get("language") || undefined,
    // the decoding options pass through from the page's own query (?keyterms=…&redact=pci)
    ...Object.fromEntries(DECODING_OPTIONS
      .filter((name) => params.has(name)).map((name) => [name, params.get(name)])),
  };
  const diarization = params.has("diarization") ? params.get("diarization") === "true" : $("diarization").checked;
  const microphoneId = $("microphone").value || params.get("microphone") || undefined;
  const source = $("source").value;
  // A meeting: the tab first (sharing it needs the click's user activation), then you.
  const plan = source === "meeting"
    ? [["tab", { source: "tab", diarization }], ["me", { source: "microphone", microphoneId, diarization: false }]]
    : [["", { source, microphoneId, diarization }]];
  const run = ++runs;
  voiceNames.clear();
  clients = plan.map(([who, own]) => Object.assign(
    new ParleyClient({ ...options, ...own, knownSpeakers: own.diarization ? known : [] }), { who, shift: 0 }));
  clients.forEach((client) => listen(client, run));
  try {
    let first;
    for (const client of clients) {
      await client.start();  // its audio's time 0 is now: later sessions' times are shifted to the first's
      first ??= performance.now();
      client.shift = (performance.now() - first) / 1000;
    }
    $("stop").disabled = false;
  } catch (error) {
    await Promise.all(clients.map((c) => c.stop()));
    showError(error.message);
    $("start").disabled = $("file").disabled = false;
  }
}

// The microphones to choose from, the chosen one kept while it is there.
async function listMicrophones() {
  const chosen = $("microphone").value || new URLSearchParams(location.search).get("microphone");
  const options = (await microphones()).map((mic, i) => new Option(mic.label || `microphone ${i + 1}`, mic.id));
  $("microphone").replaceChildren(new Option("default microphone", ""), ...options);
  $("microphone").value = options.some((o) => o.value === chosen) ? chosen : "";
}

// A tab's sound where the browser can share one (Chromium can; Firefox and Safari share
// no tab's sound); `?source=tab` chooses it, `?microphone=ID` a microphone.
function setUpSources() {
  const params = new URLSearchParams(location.search);
  if (!navigator.mediaDevices?.getDisplayMedia) {
    [...$("source").options].filter((o) => o.value !== "microphone").forEach((o) => o.remove());
  }
  const source = params.get("source");
  if ([...$("source").options].some((o) => o.value === source)) $("source").value = source;
  const showMicrophones = () => { $("microphone").hidden = $("source").value === "tab"; };
  $("source").addEventListener("change", showMicrophones);
  showMicrophones();
  listMicrophones();  // unnamed, and without ids, until the page is allowed a microphone
  navigator.mediaDevices?.addEventListener("devicechange", listMicrophones);
}

$("start").addEventListener("click", start);
$("file").addEventListener("change", () => { if ($("file").files[0]) transcribeFile($("file").files[0]); });
$("voice").addEventListener("change", () => {  // a voice you know: its speaker is shown by name
  const clip = $("voice").files[0];
  const name = clip && prompt("Whose voice is this?", clip.name.replace(/\.[^.]*$/, ""));
  if (name?.trim()) known.push({ name: name.trim(), clip });
  $("voices").textContent = known.map((voice) => voice.name).join(", ");
  $("voice").value = "";
});
$("stop").addEventListener("click", async () => {
  $("stop").disabled = true;
  await Promise.all(clients.map((c) => c.stop()));
});
$("transcript").addEventListener("click", (event) => {
  const speaker = event.target.closest(".speaker")?.dataset.speaker;
  if (!speaker) return;
  const name = prompt(`Name for ${nameOf(speaker)}`, nameOf(speaker));
  if (!name) return;
  names.set(speaker, name.trim());
  segments.forEach(render);
});
document.querySelectorAll("footer button[data-format]").forEach((button) => {
  button.addEventListener("click", () => download(button.dataset.format));
});
setUpSources();
if (new URLSearchParams(location.search).get("autostart") === "1") start();
